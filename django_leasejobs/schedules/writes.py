"""The one writer of schedule rows and of the missed ledger (SPEC §7).

As :mod:`django_leasejobs.store` is for runs: every insert into and update of
a ``Schedule`` or ``Missed`` row is a function here, one statement each, and
the modules that decide -- :mod:`.sync`, :mod:`.firing`, :mod:`.overdue`, the
operators' pause and resume, retention -- call them. Where two writers may
meet (two drives, a drive and an operator), the ``WHERE`` clause is the
compare and the row count the answer: ``True`` = this caller's write landed,
``False`` = another got there first, which is a normal outcome, never an
error.

Deleting old history is not here: :mod:`..retention` deletes old ``Missed``
rows in batches by key as it deletes old runs (S7). An operator's delete of
runs (:mod:`..store.deletes`) unlinks them with the same two statements as
:func:`forget_runs`, in its own transaction: the run store does not import
this package, whose firing imports the run store.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db.models import F, QuerySet

from django_leasejobs.clock import get_clock
from django_leasejobs.conf import conf
from django_leasejobs.models import Missed, Run, Schedule
from django_leasejobs.states import RunStatus

from .base import schedule_db

__all__ = [
    "advance",
    "close_overdue",
    "create",
    "disable",
    "disable_orphans",
    "forget_runs",
    "mark_seen",
    "note_run",
    "open_overdue",
    "orphans",
    "pause",
    "record_missed",
    "record_outcome",
    "redefine",
    "resume",
]


def _rows() -> QuerySet[Schedule]:
    return Schedule.objects.using(schedule_db())


# -- S1: the rows follow the code -----------------------------------------------------------


def create(job: str, values: dict[str, Any]) -> None:
    """Create *job*'s row with *values*, unless a concurrent drive just did (S1)."""
    _rows().get_or_create(job=job, defaults=values)


def redefine(row: Schedule, values: dict[str, Any]) -> bool:
    """Write the code's definition, *values*, to *row* (S1).

    Returns ``False`` when the row no longer holds the expression, time zone
    and ``enabled`` it was read with: a concurrent drive made the change.
    """
    same = _rows().filter(
        pk=row.pk, expression=row.expression, timezone=row.timezone, enabled=row.enabled
    )
    return bool(same.update(**values))


def disable(row: Schedule) -> bool:
    """Disable *row*, whose job is registered here without a schedule (S1); ``False`` if it was."""
    return bool(_rows().filter(pk=row.pk, enabled=True).update(enabled=False))


def mark_seen(jobs: Sequence[str], now: datetime) -> None:
    """Note that a drive registering *jobs* ran at *now*, for "orphaned" (S1, S6)."""
    _rows().filter(job__in=jobs).update(seen_at=now)


# -- S2, S3: firing -----------------------------------------------------------------------------


def advance(row: Schedule, next_due_at: datetime | None, last_due_at: datetime | None) -> bool:
    """Move *row* past the due times a firing handles: the compare-and-set that fires (S2).

    Returns ``False`` -- and nothing is fired or recorded -- when the row's
    ``next_due_at`` is no longer the one read, or it was disabled or paused
    meanwhile: another drive fired it, or an operator paused it.
    """
    won = _rows().filter(
        pk=row.pk, next_due_at=row.next_due_at, enabled=True, paused_at__isnull=True
    )
    return bool(won.update(next_due_at=next_due_at, last_due_at=last_due_at))


def note_run(row: Schedule, run: Run, now: datetime) -> None:
    """Note the run a firing started as *row*'s last run (S2)."""
    _rows().filter(pk=row.pk).update(last_run=run, last_run_at=now)


def record_missed(entries: list[Missed]) -> None:
    """Write missed due times to the ledger; the unique (job, due_at) keeps each to one row (S3)."""
    Missed.objects.using(schedule_db()).bulk_create(entries, ignore_conflicts=True)


def record_outcome(run: Run, status: RunStatus) -> None:
    """Note a scheduled run's final outcome on its schedule (S6): one statement."""
    values: dict[str, Any] = {"last_outcome": status}
    if status == RunStatus.DONE:
        values["last_success_at"] = get_clock().now_expr()  # the database's time, no read
    _rows().filter(job=run.job).update(**values)


# -- S6: overdue episodes -----------------------------------------------------------------------


def open_overdue(row: Schedule, now: datetime) -> bool:
    """Begin an overdue episode of *row* at *now* (S6); ``False`` if one is already open."""
    return bool(_rows().filter(pk=row.pk, overdue_since__isnull=True).update(overdue_since=now))


def close_overdue(row: Schedule) -> None:
    """End *row*'s overdue episode, if one is open (S6)."""
    _rows().filter(pk=row.pk, overdue_since__isnull=False).update(overdue_since=None)


# -- S4: pause and resume ------------------------------------------------------------------------


def pause(row: Schedule, now: datetime, by: str, note: str) -> bool:
    """Pause *row* at *now* (S4); ``False`` when it was already paused."""
    unpaused = _rows().filter(pk=row.pk, paused_at__isnull=True)
    return bool(unpaused.update(paused_at=now, paused_by=by, pause_note=note))


def resume(row: Schedule, now: datetime) -> bool:
    """Resume *row* at *now*, keeping the pause that ended for S3's cause (S4).

    Returns ``False`` when it was not paused.
    """
    paused = _rows().filter(pk=row.pk, paused_at__isnull=False)
    return bool(
        paused.update(
            last_paused_at=F("paused_at"),
            resumed_at=now,
            paused_at=None,
            paused_by="",
            pause_note="",
        )
    )


# -- S1, S7: retention ---------------------------------------------------------------------------


def orphans(using: str, now: datetime) -> QuerySet[Schedule]:
    """Enabled schedules whose job no drive has registered for ``ORPHAN_AFTER``: what
    :func:`disable_orphans` disables (S1).
    """
    return Schedule.objects.using(using).filter(enabled=True, seen_at__lt=now - conf.ORPHAN_AFTER)


def disable_orphans(using: str, now: datetime) -> int:
    """Disable the :func:`orphans` at *now*, so they stop reading as overdue; return how many."""
    return orphans(using, now).update(enabled=False)


def forget_runs(using: str, pks: Sequence[str]) -> None:
    """Unlink the runs *pks* from the schedules and missed due times pointing at them.

    Each is one statement by key, for a delete of those runs that uses no
    collector (retention, an operator's delete): the rows stay, pointing at
    no run, as ``SET_NULL`` would leave them.
    """
    Schedule.objects.using(using).filter(last_run__in=pks).update(last_run=None)
    Missed.objects.using(using).filter(run__in=pks).update(run=None)
