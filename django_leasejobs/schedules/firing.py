"""S2, S3: each due time fired once, and the missed-run rules (SPEC §7).

Firing is one transaction led by a compare-and-set on the row's
``next_due_at`` (and on its not being paused), with the ledger rows and the
run it starts: any number of drives, on any number of machines, may find the
same due time, and exactly one of them fires it. The rows are written by
:mod:`.store`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial

from django.db import transaction

from django_leasejobs import cron, signals
from django_leasejobs.conf import conf
from django_leasejobs.models import Missed, Run, Schedule
from django_leasejobs.registry import get_job, registry
from django_leasejobs.states import MissedAction, MissedCause, MissedRule, RunOrigin
from django_leasejobs.store import StartResult, start_as
from django_leasejobs.times import iso

from .base import MISSED_MAX, Problem, contained, schedule_db, zone_of
from .writes import advance, note_run, record_missed

__all__ = ["Window", "act", "cause_of", "fire_due_schedules", "plan"]


@dataclass(frozen=True)
class Window:
    """What a rule does with the due times from a schedule's next due time to now."""

    fire: list[datetime]  # the due times the run it starts covers (oldest first)
    missed: list[datetime]  # the due times recorded in the ledger
    dropped: int  # older missed due times only counted (bounded work)
    caught_up: datetime | None  # the newest missed due time the run serves, if any
    next_due_at: datetime | None


def plan(row: Schedule, now: datetime, cause: MissedCause | None) -> Window:
    """Decide what the due times in [``row.next_due_at``, *now*] come to (S2, S3).

    Without a *cause* the due times simply fire (they are within
    ``MISSED_GRACE``). With one -- a drive came late (``worker_down``) or the
    schedule was paused (``paused``) -- the job's rule applies to all of them.

    A ``next_due_at`` off the cron grid (moved by hand, restored, or computed
    under other tzdata) is itself a due time, the oldest; the grid resumes
    after it (D6).
    """
    zone, expression = zone_of(row.timezone), row.expression
    first = row.next_due_at
    assert first is not None
    off_grid = [] if cron.is_due(expression, zone, first) else [first]
    grid_from = first + timedelta(microseconds=1) if off_grid else first
    if cause is None or row.rule == MissedRule.REQUIRED:
        # Every due time runs, oldest first, a batch at a time; a required
        # schedule plans its next batch once this one's run has finished.
        batch, _more = cron.oldest(expression, zone, grid_from, now, MISSED_MAX - len(off_grid))
        batch = off_grid + batch
        following = cron.next_due(expression, zone, batch[-1])
        if cause is None:
            return Window(batch, [], 0, None, following)
        return Window(batch, batch, 0, batch[-1], following)
    kept, dropped = cron.newest(expression, zone, grid_from, now, MISSED_MAX)
    if off_grid and len(kept) < MISSED_MAX and not dropped:
        kept = off_grid + kept
    else:
        dropped += len(off_grid)
    next_due = cron.next_due(expression, zone, now)
    if row.rule == MissedRule.SKIP:
        return Window([], kept, dropped, None, next_due)
    return Window(kept[-1:], kept, dropped, kept[-1], next_due)


def fire_due_schedules(
    now: datetime,
    rows: list[Schedule],
    jobs: set[str] | None = None,
    problems: list[Problem] | None = None,
) -> list[str]:
    """Fire every due, enabled, unpaused schedule in *rows* of a job registered here (S2, S3).

    *jobs* narrows it to the jobs a drive was asked to handle (``--job``).

    Returns the names of the jobs fired or recorded. Each schedule is one
    transaction led by a compare-and-set on ``next_due_at`` (and on not being
    paused): a drive that lost the race, or read *rows* before another drive
    fired or an operator paused, changes nothing and records nothing. A
    schedule that cannot be planned or fired is reported in *problems*, keeps
    its ``next_due_at`` and is tried again by the next drive (D6).
    """
    problems = [] if problems is None else problems
    acted: list[str] = []
    for row in rows:
        if not row.enabled or row.paused_at is not None or row.next_due_at is None:
            continue
        if row.next_due_at > now:
            continue
        if row.job not in registry or (jobs is not None and row.job not in jobs):
            continue  # another deployment's job (D2), or not this drive's
        if contained(row.job, problems, partial(_fire, row, now)):
            acted.append(row.job)
    return acted


def _fire(row: Schedule, now: datetime) -> bool:
    assert row.next_due_at is not None
    if row.rule == MissedRule.REQUIRED and _has_live_run(row.job):
        return False  # the batch in flight runs first: one required due time after another
    cause = MissedCause.WORKER_DOWN if now - row.next_due_at > conf.MISSED_GRACE else None
    return act(row, plan(row, now, cause), now)


def _has_live_run(job: str) -> bool:
    return Run.objects.using(schedule_db()).live().filter(job=job).exists()


def act(row: Schedule, window: Window, now: datetime) -> bool:
    """Move ``next_due_at`` (compare-and-set), record the ledger, start the run: one transaction."""
    using = schedule_db()
    newest = max([*window.fire, *window.missed], default=None)
    with transaction.atomic(using=using):
        if not advance(row, window.next_due_at, newest or row.last_due_at):
            return False
        result = _start_for(row.job, window) if window.fire else None
        if window.missed:
            _record(row, window, result.run if result else None, now)
        if result is not None:
            note_run(row, result.run, now)
    return True


def _start_for(job: str, window: Window) -> StartResult:
    payload = {
        "due": iso(window.fire[-1], zulu=True),
        "covers": [iso(moment, zulu=True) for moment in window.fire],
    }
    # A run still live from an earlier due time is joined with again=True:
    # overlapping firings collapse into one follow-up (S2).
    return start_as(RunOrigin.SCHEDULE, get_job(job), payload, again=True)


def cause_of(row: Schedule, moment: datetime) -> MissedCause:
    """Why due time *moment* was missed: during the row's last pause, or no drive ran (S3)."""
    paused_from, resumed = row.last_paused_at, row.resumed_at
    if paused_from is not None and resumed is not None and paused_from <= moment <= resumed:
        return MissedCause.PAUSED
    return MissedCause.WORKER_DOWN


def _record(row: Schedule, window: Window, run: Run | None, now: datetime) -> None:
    """Record the due times *window* missed, each with its cause and action; send the signal."""
    caught = set(window.fire) if window.caught_up else set()
    rows = [
        Missed(
            job=row.job,
            due_at=moment,
            cause=cause_of(row, moment),
            action=MissedAction.CAUGHT_UP if moment in caught else MissedAction.SKIPPED,
            run=run if moment in caught else None,
            recorded_at=now,
        )
        for moment in window.missed
    ]
    record_missed(rows)
    rule, cause = row.rule, rows[-1].cause
    signals.send(
        signals.schedule_missed,
        Schedule,
        using=schedule_db(),
        schedule=row,
        due_times=list(window.missed),
        cause=cause,
        action=MissedAction.SKIPPED if rule == MissedRule.SKIP else MissedAction.CAUGHT_UP,
        dropped=window.dropped,
    )
