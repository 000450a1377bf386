"""Retention: delete finished runs and old missed-run records (SPEC S7).

Why batches: the history can be large (a minutely job keeps 43 000 runs a
month), and one ``DELETE`` of all of it would hold its row locks -- on SQLite
the whole database's write lock -- for as long as it takes, stalling every
drive's claims and commits behind it, and would load every row into memory if
Django's delete collector were involved. So each batch selects at most
``batch_size`` primary keys and deletes by key, in its own short transaction,
with a fixed handful of statements whatever the rows hold: no collector, no
signals, nothing loaded but the keys. A long prune is then many short writes
that drives interleave with, and an interrupted one has kept what it deleted.

Live runs (``running``, ``held``) are never touched, whatever their age: they
are work in progress, or waiting for an operator (A4).

Schedules are never deleted; one whose job no drive has registered for
``ORPHAN_AFTER`` (another deployment that went away, a renamed job) is
disabled here, so it stops reading as overdue (S1).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, router, transaction
from django.db.models import QuerySet

from .clock import get_clock
from .conf import conf
from .models import Missed, PassStat, PassStatHalfHour, Run, Step, TaskAttempt
from .querysets import RunQuerySet
from .schedules.writes import disable_orphans, forget_runs, orphans
from .store.limits import prune_idle
from .store.lock_waits import lock_wait_bounded

__all__ = ["PruneReport", "prune", "prune_stats"]

logger = logging.getLogger("django_leasejobs")

#: Parameters a batch's statements carry besides its keys (statuses, cutoff), with room to spare.
_OTHER_PARAMS = 16


@dataclass(frozen=True)
class PruneReport:
    """What one :func:`prune` deleted (or, in a dry run, would delete)."""

    #: Finished runs deleted.
    runs: int
    #: Step rows of those runs deleted.
    steps: int
    #: Missed-run records deleted.
    missed: int
    #: Rows older than this went (the database's clock now minus the retention).
    cutoff: datetime
    #: True when nothing was deleted and the counts say what would have been.
    dry_run: bool = False
    #: Orphaned schedules disabled: no drive registered their job for ``ORPHAN_AFTER`` (S1).
    schedules: int = 0

    def as_dict(self) -> dict[str, Any]:
        """Return the report as JSON-ready data, the cutoff in ISO 8601."""
        data = asdict(self)
        data["cutoff"] = self.cutoff.isoformat()
        return data

    def summary(self) -> str:
        """Return the one-line summary the command prints."""
        verb = "would delete" if self.dry_run else "deleted"
        disabled = "would disable" if self.dry_run else "disabled"
        return (
            f"{verb} runs={self.runs} steps={self.steps} missed={self.missed} "
            f"{disabled} schedules={self.schedules} cutoff={self.cutoff.isoformat()}"
        )


def prune(
    *, older_than: timedelta | None = None, batch_size: int = 1000, dry_run: bool = False
) -> PruneReport:
    """Delete finished runs, their steps and missed-run records older than a cutoff (S7).

    Parameters
    ----------
    older_than
        How old a row must be to go: a finished run by its ``ended_at``, a
        missed-run record by its ``recorded_at``. Default:
        ``LEASEJOBS["RETENTION"]`` (30 days). The cutoff is the database's
        clock now minus this (L1).
    batch_size
        The most primary keys one batch selects and deletes, each batch in its
        own transaction. Lowered where the backend limits the parameters of
        one statement (983 on SQLite).
    dry_run
        Count what would be deleted, and delete nothing.

    Returns
    -------
    PruneReport
        The counts and the cutoff. Live runs (``running``, ``held``) are never
        counted or deleted. A schedule whose ``last_run`` is deleted keeps
        existing, with ``last_run`` empty; so does a newer missed-run record
        whose ``run`` is deleted.

    Raises
    ------
    ValueError
        When *older_than* is negative or *batch_size* is less than 1.
    django.db.DatabaseError
        When a statement fails. The batches committed before it stay deleted.
    """
    retention = conf.RETENTION if older_than is None else older_than
    if retention < timedelta(0):
        raise ValueError(f"older_than must not be negative, not {retention!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size!r}")
    using = router.db_for_write(Run)
    batch_size = _fitting(using, batch_size)
    now = get_clock().now(using)
    cutoff = now - retention
    if dry_run:
        report = _count(using, cutoff, orphans(using, now).count())
        logger.info("Prune dry run %s", report.summary())
        return report
    # Missed records first: a run they point at then has fewer rows to unlink.
    missed = _prune_missed(using, cutoff, batch_size)
    runs, steps = _prune_runs(using, cutoff, batch_size)
    prune_idle()  # flow control's idle slots and rate states (§14)
    disabled = disable_orphans(using, now)
    if disabled:
        logger.warning("Orphaned schedules disabled: %s", disabled)
    report = PruneReport(runs=runs, steps=steps, missed=missed, cutoff=cutoff, schedules=disabled)
    logger.info("Prune %s", report.summary())
    return report


def prune_stats(batch_size: int = 1000) -> int:
    """Delete pass statistics older than ``LEASEJOBS["STATS_RETENTION"]`` (O1); return how many.

    The minutes, then the half-hours (O4), by the same rule: a row goes when
    the minute or half-hour it starts at is before the cutoff (the database's
    clock now minus the retention). In batches by key, each its own short
    transaction, as runs are pruned. Run by the drive's housekeeping: a lock
    on either table (a migration, an operator's ``LOCK``) makes it give up
    after a short lock timeout rather than hold the drive (F11); it runs
    again at the next prune.
    """
    using = router.db_for_write(PassStat)
    batch_size = _fitting(using, batch_size)
    cutoff = get_clock().now(using) - conf.STATS_RETENTION
    with lock_wait_bounded(using):
        minutes = _delete_by_key(
            PassStat.objects.using(using).filter(minute__lt=cutoff), batch_size
        )
        half_hours = _delete_by_key(
            PassStatHalfHour.objects.using(using).filter(half_hour__lt=cutoff), batch_size
        )
    if minutes or half_hours:
        logger.info("Pass statistics pruned rows=%s half_hours=%s", minutes, half_hours)
    return minutes + half_hours


def _fitting(using: str, batch_size: int) -> int:
    """Return *batch_size*, lowered to fit the backend's limit on statement parameters.

    Django supports SQLite from 3.31, which refuses more than 999 parameters
    in one statement (``max_query_params``); the default batch of 1000 keys
    would not fit there.
    """
    limit = connections[using].features.max_query_params
    return batch_size if limit is None else max(1, min(batch_size, limit - _OTHER_PARAMS))


def _old_runs(using: str, cutoff: datetime) -> RunQuerySet[Run]:
    """Finished runs that ended before *cutoff*; live runs are excluded whatever their age.

    So is a run cancelled while its pass was in flight, until it lets go of its
    key (§3 ``cancel``): deleting it would free the key under that pass (A7).
    """
    return Run.objects.using(using).finished().filter(ended_at__lt=cutoff, live_key__isnull=True)


def _count(using: str, cutoff: datetime, orphaned: int) -> PruneReport:
    old = _old_runs(using, cutoff)
    return PruneReport(
        runs=old.count(),
        steps=Step.objects.using(using).filter(run__in=old.values("pk")).count(),
        missed=Missed.objects.using(using).filter(recorded_at__lt=cutoff).count(),
        cutoff=cutoff,
        dry_run=True,
        schedules=orphaned,
    )


def _prune_runs(using: str, cutoff: datetime, batch_size: int) -> tuple[int, int]:
    """Delete old finished runs batch by batch; return (runs, steps) deleted."""
    runs = steps = 0
    while True:
        with transaction.atomic(using=using):
            # Ordered by key: ids sort by creation time (ids.py), so the oldest
            # runs come first and the database can walk the primary key.
            pks = list(
                _old_runs(using, cutoff).order_by("pk").values_list("pk", flat=True)[:batch_size]
            )
            if pks:
                # Rows that point at these runs first, each ONE statement by key,
                # so the run delete below needs no collector: Django's SET_NULL
                # and CASCADE are emulated by the collector, which would load
                # the rows; the database's own constraints do neither.
                forget_runs(using, pks)
                steps += Step.objects.using(using).filter(run__in=pks)._raw_delete(using)
                TaskAttempt.objects.using(using).filter(run__in=pks)._raw_delete(using)
                # The age and status test again, so the delete never takes a row
                # the select did not mean, whatever happened in between.
                runs += _old_runs(using, cutoff).filter(pk__in=pks)._raw_delete(using)
        if len(pks) < batch_size:
            return runs, steps


def _prune_missed(using: str, cutoff: datetime, batch_size: int) -> int:
    """Delete missed-run records older than *cutoff* batch by batch; return how many."""
    return _delete_by_key(Missed.objects.using(using).filter(recorded_at__lt=cutoff), batch_size)


def _delete_by_key(old: QuerySet[Any], batch_size: int) -> int:
    """Delete *old*'s rows batch by batch in key order, each its own transaction; count them.

    For rows nothing points at (missed records, statistics): one select of
    keys and one delete by key per batch, no collector.
    """
    using = old.db
    deleted = 0
    while True:
        with transaction.atomic(using=using):
            pks = list(old.order_by("pk").values_list("pk", flat=True)[:batch_size])
            if pks:
                deleted += old.model.objects.using(using).filter(pk__in=pks)._raw_delete(using)
        if len(pks) < batch_size:
            return deleted
