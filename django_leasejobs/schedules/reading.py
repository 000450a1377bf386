"""S6: what a schedule reads as (SPEC §7). Read-only: the rows are written by :mod:`.store`."""

from __future__ import annotations

from datetime import datetime, timedelta

from django_leasejobs import cron
from django_leasejobs.conf import conf
from django_leasejobs.errors import describe
from django_leasejobs.exceptions import InvalidSchedule
from django_leasejobs.models import Run, Schedule
from django_leasejobs.registry import registry
from django_leasejobs.states import RunStatus, ScheduleState

from .base import schedule_db, zone_of

__all__ = ["live_runs", "orphaned", "period", "problem", "state"]


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
