"""S6: what a schedule reads as, and ``job_overdue`` once per episode (SPEC §7)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django_leasejobs import cron, signals
from django_leasejobs.clock import get_clock
from django_leasejobs.conf import conf
from django_leasejobs.errors import describe
from django_leasejobs.exceptions import InvalidSchedule
from django_leasejobs.models import Run, Schedule
from django_leasejobs.registry import registry
from django_leasejobs.states import RunStatus, ScheduleState

from .base import Problem, contained, schedule_db, zone_of

__all__ = [
    "check_overdue",
    "live_runs",
    "orphaned",
    "period",
    "problem",
    "record_outcome",
    "state",
]

logger = logging.getLogger("django_leasejobs")


def period(row: Schedule) -> timedelta:
    """The time between two due times around the next one (for "missed": twice this).

    Raises :class:`InvalidSchedule` when the row's expression or time zone
    cannot be planned here.
    """
    try:
        tz = zone_of(row.timezone)
        first = row.next_due_at or cron.next_due(row.expression, tz, row.updated_at)
        return cron.next_due(row.expression, tz, first) - first
    except Exception as exc:  # zoneinfo, croniter: each has its own errors
        raise InvalidSchedule(problem(row) or describe(exc)) from exc


def problem(row: Schedule) -> str | None:
    """Why this process cannot plan *row*, or ``None`` (D6, A5)."""
    try:
        tz = zone_of(row.timezone)
    except Exception:  # ZoneInfoNotFoundError, ValueError for a bad key
        return f"unknown time zone {row.timezone!r}"
    try:
        cron.next_due(row.expression, tz, row.next_due_at or row.updated_at)
    except Exception:  # croniter's errors: a bad expression, or no date
        return f"cron expression {row.expression!r} cannot be planned"
    return None


def orphaned(row: Schedule, now: datetime) -> bool:
    """Whether no drive has registered *row*'s job for ``ORPHAN_AFTER`` (S1, S6)."""
    return row.seen_at is not None and now - row.seen_at > conf.ORPHAN_AFTER


def state(row: Schedule, live: Run | None, now: datetime) -> ScheduleState:
    """Read *row* as one of the S6 states, given its live run (if any) at *now*."""
    if orphaned(row, now):
        return ScheduleState.ORPHANED
    if row.paused_at is not None:
        return ScheduleState.PAUSED
    if live is not None:
        spec = registry.get(row.job) if row.job in registry else None
        stall_after = (spec.stall_after if spec else None) or conf.STALL_AFTER
        if now - live.started_at > stall_after:
            return ScheduleState.STALLED
        return ScheduleState.RETRYING if live.attempts else ScheduleState.RUNNING
    if row.last_run_at is None and row.last_success_at is None:
        return ScheduleState.INVALID if problem(row) else ScheduleState.NEVER_RUN
    if row.last_outcome == RunStatus.FAILED:
        return ScheduleState.FAILED
    try:
        twice = 2 * period(row)
    except InvalidSchedule:
        return ScheduleState.INVALID
    if row.last_success_at is None or now - row.last_success_at > twice:
        return ScheduleState.MISSED
    return ScheduleState.OK


def live_runs(jobs: list[str]) -> dict[str, Run]:
    """The live run of each of *jobs* (at most one each, R1): what :func:`state` reads of it."""
    live = Run.objects.using(schedule_db()).live().filter(job__in=jobs)
    return {run.job: run for run in live.only("job", "status", "started_at", "attempts")}


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
    same = Schedule.objects.using(schedule_db()).filter(pk=row.pk)
    if current in ScheduleState.overdue() and row.overdue_since is None:
        if same.filter(overdue_since__isnull=True).update(overdue_since=now):
            signals.send(
                signals.job_overdue, Schedule, using=schedule_db(), schedule=row, state=current
            )
    elif current not in ScheduleState.overdue() and row.overdue_since is not None:
        same.filter(overdue_since__isnull=False).update(overdue_since=None)


def record_outcome(run: Run, status: RunStatus) -> None:
    """Note a scheduled run's final outcome on its schedule (S6): one statement."""
    values: dict[str, Any] = {"last_outcome": status}
    if status == RunStatus.DONE:
        values["last_success_at"] = get_clock().now_expr()  # the database's time, no read
    Schedule.objects.using(schedule_db()).filter(job=run.job).update(**values)
