"""What ``leasejobs_status`` reports: the schedules with their state, the paused
queues, the live runs (a held one with its step in flight, A8), the runs no
drive will finish, and each limited job's slots and rate (S6, W6, §11, C5),
read and shaped as JSON-ready data.

Read-only. A run's payload is never read into it; its cursor is shown as raw
text cut to :data:`CURSOR_MAX` characters. A row that cannot be read back is
listed by its id and why, never by what it holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import router
from django.db.models import Q

from .clock import get_clock
from .in_flight import InFlight, in_flight_of
from .known import TASK_JOB, known_as
from .models import PausedQueue, Run, Schedule
from .querysets import RunQuerySet
from .reading import Unreadable, read_robustly, stranded
from .registry import Job, registry
from .schedules import live_runs, problem, state
from .states import LeaseState, RunStatus
from .store import limits
from .times import iso

__all__ = [
    "CURSOR_MAX",
    "in_flight_entry",
    "limit_entry",
    "paused_queue_entry",
    "read_status",
    "run_entry",
    "schedule_entry",
]

#: The most characters of a cursor shown (its raw JSON text).
CURSOR_MAX = 40

#: The columns of the live-run read: never the payload (nor the rerun payload).
_RUN_FIELDS = (
    "id",
    "job",
    "instance",
    "status",
    "attempts",
    "failure_code",
    "cursor",
    "started_at",
    "next_attempt_at",
    "lease_owner",
    "lease_holder",
    "lease_began_at",
    "throttled_by",
)


def _cut(text: str | None, limit: int) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return text[: limit - 1] + "…"


def schedule_entry(row: Schedule, live: Run | None, now: datetime) -> dict[str, Any]:
    """One schedule as the JSON output lists it (the table shows the same)."""
    return {
        "job": row.job,
        "state": state(row, live, now),
        "problem": problem(row),
        "enabled": row.enabled,
        "expression": row.expression,
        "timezone": row.timezone,
        "rule": row.rule,
        "next_due_at": iso(row.next_due_at),
        "paused": row.paused_at is not None,
        "paused_at": iso(row.paused_at),
        "paused_by": row.paused_by or None,
        "pause_note": row.pause_note or None,
        "last_run": row.last_run_id,
        "last_outcome": row.last_outcome or None,
        "last_run_at": iso(row.last_run_at),
        "last_success_at": iso(row.last_success_at),
    }


def paused_queue_entry(row: PausedQueue) -> dict[str, Any]:
    """One paused queue (W6) as the JSON output lists it: who paused it, when, and why."""
    return {
        "queue": row.queue,
        "paused_by": row.paused_by or None,
        "paused_at": iso(row.paused_at),
        "note": row.note or None,
    }


def run_entry(run: Run, now: datetime) -> dict[str, Any]:
    """One live run as the JSON output lists it: no payload, the cursor cut short.

    ``job`` is the name the run is known by: a Django task's run, its task's path.

    Its lease is judged at *now*, the database's time (L1, A8): ``lease`` is
    held, claimed, expired, throttled (``throttled_by`` says which limit) or
    none. A throttled run holds nothing, whatever claim a drive has on it to
    ask its limit again, so it names no holder (C5).
    """
    lease = run.lease_state(now)
    leased = lease in (LeaseState.LEASED, LeaseState.CLAIMED, LeaseState.EXPIRED)
    return {
        "id": run.id,
        "job": known_as(run.job, run.instance),  # a task run: its task's path (§9)
        "instance": run.instance,
        "status": run.status,
        "attempts": run.attempts,
        "failure_code": run.failure_code or None,
        "cursor": _cut(run.cursor, CURSOR_MAX),
        "started_at": iso(run.started_at),
        "next_attempt_at": iso(run.next_attempt_at),
        "lease": lease.value,
        "lease_holder": (run.lease_holder or "?") if leased else None,
        "lease_expired": (lease == LeaseState.EXPIRED) if leased else None,
        "throttled_by": run.throttled_by or None,
    }


def unreadable_entry(run_id: str, reason: str) -> dict[str, Any]:
    """A live run whose row the database cannot hand back (R9, §12): its id and why."""
    fields = ("job", "instance", "status", "attempts", "failure_code", "cursor", "started_at")
    lease = ("lease", "lease_holder", "lease_expired", "throttled_by", "in_flight")
    unknown = dict.fromkeys((*fields, "next_attempt_at", *lease))
    return unknown | {"id": run_id, "unreadable": reason}


def _read_runs(
    runs: RunQuerySet[Run], within: RunQuerySet[Run], now: datetime
) -> list[dict[str, Any]]:
    """The runs as entries; a row that cannot be read back is listed as unreadable, not fatal.

    Each held run says its step in flight (A8), read for all of them at once.
    """
    found = list(read_robustly(runs, within))
    held = [run.pk for run in found if isinstance(run, Run) and run.status == RunStatus.HELD]
    stopped_in = in_flight_of(held, using=runs.db) if held else {}
    return [
        unreadable_entry(*run)
        if isinstance(run, Unreadable)
        else run_entry(run, now) | {"in_flight": in_flight_entry(stopped_in.get(run.pk))}
        for run in found
    ]


def in_flight_entry(found: InFlight | None) -> dict[str, Any] | None:
    """A held run's step in flight as the JSON output gives it; ``None`` for any other run.

    ``step`` and ``began_at`` name the step its pass stopped in; with no step
    in flight, ``last_completed`` the step it stopped after (``None``: no step
    had begun).
    """
    if found is None:
        return None
    return {
        "step": found.step,
        "began_at": iso(found.began_at),
        "last_completed": found.last_completed,
    }


def read_status(jobs: Sequence[str] | None, limit: int) -> tuple[dict[str, Any], bool]:
    """Read what the command prints: ``{"now", "schedules", "runs", "stranded", "limits"}``,
    and ``"paused_queues"`` while any queue is paused (W6).

    The flag says whether more than *limit* runs are live (the list is cut).
    Paused queues are listed whatever *jobs* says: a queue is not a job's.
    """
    using = router.db_for_write(Schedule)
    now = get_clock().now(using)
    schedules = Schedule.objects.using(using).all()
    runs = Run.objects.using(using).live()
    if jobs:
        schedules = schedules.filter(job__in=jobs)
        # A name may be a task's path, as the runs are listed (§9).
        runs = runs.filter(Q(job__in=jobs) | Q(job=TASK_JOB, instance__in=jobs))
    # Enabled first, then by job, sorted here so every database orders alike.
    rows = sorted(schedules, key=lambda row: (not row.enabled, row.job))
    live = live_runs([row.job for row in rows]) if rows else {}
    shown = runs.only(*_RUN_FIELDS)
    newest = _read_runs(shown.order_by("-started_at", "-id")[: limit + 1], shown, now)
    status = {
        "now": iso(now),
        "schedules": [schedule_entry(row, live.get(row.job), now) for row in rows],
        "runs": newest[:limit],
        "stranded": [{"id": run_id, "why": why} for run_id, why in stranded(limit, using)],
        "limits": [limit_entry(spec, now) for spec in _limited(jobs)],
    }
    paused = PausedQueue.objects.using(using).order_by("queue")
    if entries := [paused_queue_entry(row) for row in paused]:
        # Only while there are any, as "unreadable" is only on a run that is: the keys
        # of a status with no paused queue are those of the command before W6.
        status["paused_queues"] = entries
    return status, len(newest) > limit


def _limited(jobs: Sequence[str] | None) -> list[Job]:
    wanted = None if not jobs else set(jobs)
    return [
        spec
        for spec in sorted(registry, key=lambda spec: spec.name)
        if spec.limit is not None and (wanted is None or spec.name in wanted)
    ]


def limit_entry(spec: Job, now: datetime) -> dict[str, Any]:
    """C5: a limited job's limits, and per key its slots in use and its rate's next begin."""
    limit = spec.limit
    assert limit is not None
    in_use = limits.slots_in_use(spec.name) if limit.concurrency else {}
    rates = limits.rate_states(spec.name) if limit.rate else {}
    waiting = (
        Run.objects.using(router.db_for_write(Run))
        .filter(job=spec.name)
        .waiting_for_limit()
        .count()
    )
    keys = sorted(set(in_use) | set(rates))
    return {
        "job": spec.name,
        "concurrency": limit.concurrency,
        "rate": None
        if limit.rate is None
        else {"n": limit.rate.n, "per_seconds": limit.rate.per.total_seconds()},
        "keyed": limit.key is not None,
        "waiting": waiting,
        "keys": [
            {
                "key": key,
                "slots_in_use": in_use.get(key, 0),
                # A rate already passed allows a begin now: shown as none due.
                "next_begin_at": iso(rates[key]) if key in rates and rates[key] > now else None,
            }
            for key in keys
        ],
    }
