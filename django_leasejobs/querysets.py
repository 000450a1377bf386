"""The read side: querysets named for intent.

Nobody else spells out a status or lease predicate; in particular the due read
is written once, here, as ONE index range (SPEC §2): ``status = 'running' AND
next_attempt_at <= now``. An ``IS NULL OR <=`` form would stop SQLite from
using the index and sort every ready row on each poll.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.apps import apps
from django.db import models
from django.db.models import Exists, OuterRef
from django.db.models.expressions import Combinable

from .states import LIVE_STATUSES, RunStatus

if TYPE_CHECKING:
    from .models import Run, Step  # noqa: F401

__all__ = ["RunQuerySet", "live_key"]


def live_key(job: str, instance: str) -> str:
    """Return the coalescing key of (*job*, *instance*) (SPEC R1).

    Job names cannot contain ``|`` (see :mod:`~django_leasejobs.registry`), so
    the first ``|`` splits the key unambiguously whatever the instance holds.
    """
    return f"{job}|{instance}"


class RunQuerySet(models.QuerySet["Run"]):
    def live(self) -> RunQuerySet:
        """Runs that hold their coalescing key: running or held."""
        return self.filter(status__in=LIVE_STATUSES)

    def finished(self) -> RunQuerySet:
        return self.exclude(status__in=LIVE_STATUSES)

    def held(self) -> RunQuerySet:
        return self.filter(status=RunStatus.HELD)

    def for_key(self, job: str, instance: str) -> RunQuerySet:
        return self.filter(live_key=live_key(job, instance))

    def due(self, now: Combinable) -> RunQuerySet:
        """Runs a drive may claim at *now*: highest priority first, then in due order (D1, D7).

        Read in the order of the due index, so a ``LIMIT`` stops the read early
        and nothing is sorted; what it may read past is live runs of a higher
        priority that are not yet due, never finished ones.
        """
        return self.filter(status=RunStatus.RUNNING, next_attempt_at__lte=now).order_by(
            "-priority", "next_attempt_at", "id"
        )

    def claimable(self, now: Combinable, *, took_over: bool) -> RunQuerySet:
        """Runs a claim may take at *now* (L2): due, in the form the drive saw (L3).

        ``took_over`` picks runs whose last lease had begun (a takeover, which
        charges an attempt) or had not (which costs nothing).
        """
        return self.filter(
            status=RunStatus.RUNNING, next_attempt_at__lte=now, lease_began_at__isnull=not took_over
        )

    def leased(self, now: Combinable) -> RunQuerySet:
        """Running runs whose lease has not yet expired at *now*."""
        return self.filter(
            status=RunStatus.RUNNING, lease_owner__isnull=False, next_attempt_at__gt=now
        )

    def waiting(self) -> RunQuerySet:
        """Running runs no lease holds: each falls due at its ``next_attempt_at`` (W1, W3).

        A retry's back-off, a ``Defer``, a ``run_after``, a throttled run's
        release. A leased run is not waiting: its holder's renewals move it.
        """
        return self.filter(status=RunStatus.RUNNING, lease_owner__isnull=True)

    def unpaused(self) -> RunQuerySet:
        """Runs of queues no operator has paused (W6).

        Read in the statement that reads the runs, so a drive needs no read
        of its own to step over a paused queue, and sees a pause or a resume
        at its next due read.
        """
        paused = apps.get_model("leasejobs", "PausedQueue")
        return self.filter(~Exists(paused.objects.filter(queue=OuterRef("queue"))))

    def held_by(self, owner: str) -> RunQuerySet:
        """The run *owner* holds, if it still does: the fence of every pass write (L6)."""
        return self.filter(status=RunStatus.RUNNING, lease_owner=owner)

    def held_by_any(self, owners: list[str]) -> RunQuerySet:
        """The runs any of *owners* holds: claims made together, each under its own token."""
        return self.filter(status=RunStatus.RUNNING, lease_owner__in=owners)

    def never_due(self) -> RunQuerySet:
        """``running`` runs with no ``next_attempt_at``: no drive will reach them (§11).

        A range of the due index: ``status = 'running' AND next_attempt_at IS NULL``.
        """
        return self.filter(status=RunStatus.RUNNING, next_attempt_at__isnull=True)

    def keyed_not_live(self) -> RunQuerySet:
        """Rows holding a coalescing key while not live -- a status outside the vocabulary,
        say -- which every start() of that key joins (§11). A cancelled run whose pass is
        still stopping holds its key on purpose and is not one of them.

        Read along the live-key index: its size tracks live runs.
        """
        return (
            self.filter(live_key__isnull=False)
            .exclude(status__in=LIVE_STATUSES)
            .exclude(status=RunStatus.CANCELLED, next_attempt_at__isnull=False)
        )
