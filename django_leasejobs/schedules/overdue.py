"""S6: ``job_overdue`` once per episode of a schedule reading stalled or missed (SPEC §7)."""

from __future__ import annotations

from datetime import datetime
from functools import partial

from django_leasejobs import signals
from django_leasejobs.models import Run, Schedule
from django_leasejobs.registry import registry
from django_leasejobs.states import ScheduleState

from .base import Problem, contained, schedule_db
from .reading import live_runs, state
from .writes import close_overdue, open_overdue

__all__ = ["check_overdue"]


def check_overdue(
    rows: list[Schedule], now: datetime, problems: list[Problem] | None = None
) -> None:
    """Send ``job_overdue`` once per episode of a schedule reading stalled or missed (S6).

    The episode is ``overdue_since``, set and cleared by compare-and-set, so
    concurrent drives send the signal once.
    """
    problems = [] if problems is None else problems
    watched = [row for row in rows if row.enabled and row.job in registry]
    if not watched:
        return
    live = live_runs([row.job for row in watched])
    for row in watched:
        contained(row.job, problems, partial(_watch, row, live.get(row.job), now))


def _watch(row: Schedule, live: Run | None, now: datetime) -> None:
    current = state(row, live, now)
    if current in ScheduleState.overdue() and row.overdue_since is None:
        if open_overdue(row, now):
            signals.send(
                signals.job_overdue, Schedule, using=schedule_db(), schedule=row, state=current
            )
    elif current not in ScheduleState.overdue() and row.overdue_since is not None:
        close_overdue(row)
