"""The read side: querysets named for intent.

Nobody else spells out a status or lease predicate; in particular the due read
is written once, here, as ONE index range (SPEC §2): ``status = 'running' AND
next_attempt_at <= now``. An ``IS NULL OR <=`` form would stop SQLite from
using the index and sort every ready row on each poll.
"""

from __future__ import annotations

from typing import Self, TypeVar

from django.apps import apps
from django.db import models
from django.db.models import Count, Exists, OuterRef, Q
from django.db.models.expressions import Combinable

from .states import LIVE_STATUSES, RunStatus

__all__ = ["RunQuerySet", "lease_in_flight", "live_key"]


def live_key(job: str, instance: str) -> str:
    """Return the coalescing key of (*job*, *instance*) (SPEC R1).

    Job names cannot contain ``|`` (see :mod:`~django_leasejobs.registry`), so
    the first ``|`` splits the key unambiguously whatever the instance holds.
    """
    return f"{job}|{instance}"


def lease_in_flight(now: Combinable) -> Q:
    """A lease that has begun and not expired at *now*: its pass may be running (L4, L6).

    A condition rather than a filter, for the one statement that keeps what
    it matches and clears the rest: a cancel's ``Case`` (§3 ``cancel``).
    """
    return Q(lease_began_at__isnull=False, next_attempt_at__gt=now)


#: The model a :class:`RunQuerySet` reads: ``Run`` (``models.runs`` builds its manager from
#: this class, so this module names no model -- no import back, not even for annotations).
_Run = TypeVar("_Run", bound=models.Model)


class RunQuerySet(models.QuerySet[_Run]):
    def live(self) -> Self:
        """Runs that hold their coalescing key: running or held."""
        return self.filter(status__in=LIVE_STATUSES)

    def finished(self) -> Self:
        return self.exclude(status__in=LIVE_STATUSES)

    def held(self) -> Self:
        return self.filter(status=RunStatus.HELD)

    def running(self) -> Self:
        """Runs with passes still to come: due, waiting or leased (the status index)."""
        return self.filter(status=RunStatus.RUNNING)

    def of_jobs(self, names: tuple[str, ...], queues: tuple[str, ...] | None) -> Self:
        """Runs of the jobs *names* and, when given, of the *queues* only (D2, W4)."""
        runs = self.filter(job__in=names)
        return runs if queues is None else runs.filter(queue__in=queues)

    def live_and_stopping(self) -> dict[str, int]:
        """How many of these runs are live, and how many cancelled with their pass stopping.

        One aggregate: what a delete of key-holding runs says it refused (A7).
        """
        cancelled = Q(status=RunStatus.CANCELLED)
        counts: dict[str, int] = self.aggregate(
            live=Count("pk", filter=~cancelled), stopping=Count("pk", filter=cancelled)
        )
        return counts

    def due(self, now: Combinable) -> Self:
        """Runs a drive may claim at *now*: highest priority first, then in due order (D1, D7).

        Read in the order of the due index, so a ``LIMIT`` stops the read early
        and nothing is sorted; what it may read past is live runs of a higher
        priority that are not yet due, never finished ones.
        """
        return self.filter(status=RunStatus.RUNNING, next_attempt_at__lte=now).order_by(
            "-priority", "next_attempt_at", "id"
        )

    def claimable(self, now: Combinable, *, took_over: bool) -> Self:
        """Runs a claim may take at *now* (L2): due, in the form the drive saw (L3).

        ``took_over`` picks runs whose last lease had begun (a takeover, which
        charges an attempt) or had not (which costs nothing).
        """
        return self.filter(
            status=RunStatus.RUNNING, next_attempt_at__lte=now, lease_began_at__isnull=not took_over
        )

    def leased(self, now: Combinable) -> Self:
        """Running runs whose lease has not yet expired at *now*."""
        return self.filter(
            status=RunStatus.RUNNING, lease_owner__isnull=False, next_attempt_at__gt=now
        )

    def waiting(self) -> Self:
        """Running runs no lease holds: each falls due at its ``next_attempt_at`` (W1, W3).

        A retry's back-off, a ``Defer``, a ``run_after``, a throttled run's
        release. A leased run is not waiting: its holder's renewals move it.
        """
        return self.filter(status=RunStatus.RUNNING, lease_owner__isnull=True)

    def throttled(self) -> Self:
        """Waiting runs whose last claim found their job's limit reached (C2, C3, C5)."""
        return self.waiting().exclude(throttled_by="")

    def waiting_for_limit(self) -> Self:
        """Running runs whose last claim found their job's limit reached, claimed again or not.

        What ``leasejobs_status`` counts as waiting for a limit (C5): a drive's
        new claim on such a run only asks the limit again, so the run reads as
        throttled until a pass of it begins (``Run.lease_state``).
        """
        return self.running().exclude(throttled_by="")

    def unpaused(self) -> Self:
        """Runs of queues no operator has paused (W6).

        Read in the statement that reads the runs, so a drive needs no read
        of its own to step over a paused queue, and sees a pause or a resume
        at its next due read.
        """
        paused = apps.get_model("leasejobs", "PausedQueue")
        return self.filter(~Exists(paused.objects.filter(queue=OuterRef("queue"))))

    def owned_by(self, owner: str) -> Self:
        """The run *owner* holds, if it still does: the fence of every pass write (L6)."""
        return self.filter(status=RunStatus.RUNNING, lease_owner=owner)

    def lease_of(self, owner: str | None) -> Self:
        """Runs whose lease *owner* holds, whatever their status: a lease as it was read.

        ``None`` matches runs with no lease, as the column read back says.
        """
        return self.filter(lease_owner=owner)

    def unleased(self) -> Self:
        """Runs no lease holds, whatever their status."""
        return self.filter(lease_owner__isnull=True)

    def claimed_by_process(self, holder: str) -> Self:
        """Runs whose last claim was made by the process *holder* (host:pid:start, L9)."""
        return self.filter(lease_holder=holder)

    def claimed_on_host(self, prefix: str) -> Self:
        """Runs whose last claim was made by a process of the host *prefix* names (L9)."""
        return self.filter(lease_holder__startswith=prefix)

    def owned_by_any(self, owners: list[str]) -> Self:
        """The runs any of *owners* holds: claims made together, each under its own token."""
        return self.filter(status=RunStatus.RUNNING, lease_owner__in=owners)

    def lease_ends_after(self, at: Combinable) -> Self:
        """Runs whose lease, if any, lasts past *at*: unexpired then (L4, L7, L9)."""
        return self.filter(next_attempt_at__gt=at)

    def unbegun(self) -> Self:
        """Runs whose lease, if any, has not begun: a claim let go costs nothing (L2, L5)."""
        return self.filter(lease_began_at__isnull=True)

    def in_flight(self, now: Combinable) -> Self:
        """Runs whose pass may be running at *now*: a begun, unexpired lease (L4, L6).

        Running ones, and those cancelled mid-pass: such a run keeps its lease
        until its pass has stopped (§3 ``cancel``), and with it a concurrency
        slot (C2).
        """
        return self.filter(
            lease_in_flight(now), status__in=(RunStatus.RUNNING, RunStatus.CANCELLED)
        )

    def cancellable(self) -> Self:
        """Runs a cancel may end: live ones, and any other row holding a key (stranded, §11).

        Not one cancelled already, whose pass may still be stopping.
        """
        return self.filter(
            Q(status__in=LIVE_STATUSES)
            | (Q(live_key__isnull=False) & ~Q(status=RunStatus.CANCELLED))
        )

    def cancelled_by(self, owner: str) -> Self:
        """The run cancelled while *owner*'s pass was in flight: its key is that pass's to free."""
        return self.filter(status=RunStatus.CANCELLED, lease_owner=owner)

    def cancelled_expired(self, now: Combinable) -> Self:
        """Runs cancelled mid-pass whose lease has expired at *now*: their pass died with it.

        A range of the due index (``status = 'cancelled' AND next_attempt_at <=
        now``): only a run cancelled mid-pass keeps a ``next_attempt_at``.
        """
        return self.filter(status=RunStatus.CANCELLED, next_attempt_at__lte=now)

    def never_due(self) -> Self:
        """``running`` runs with no ``next_attempt_at``: no drive will reach them (§11).

        A range of the due index: ``status = 'running' AND next_attempt_at IS NULL``.
        """
        return self.filter(status=RunStatus.RUNNING, next_attempt_at__isnull=True)

    def keyed_not_live(self) -> Self:
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
