"""Cron schedules: rows kept in step with the code, due times fired once, and
the missed-run rules (SPEC §7, S1-S5).

The definition is the code (``@job(schedule=...)``); a :class:`Schedule` row
holds the state: the next due time, the pause, the last run. Every change of
state that two drives could race on is a compare-and-set on that row --
firing on ``next_due_at``, pausing on ``paused_at`` -- inside one transaction
with what it records, so a due time is fired and recorded once however many
drives or operators act at the same moment.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db import router, transaction
from django.db.models import F
from django.dispatch import Signal

from . import cron, signals
from .clock import get_clock
from .conf import conf
from .errors import describe
from .models import Missed, MissedAction, MissedCause, Run, Schedule
from .registry import Job, MissedRule, get_job, registry
from .signals import send_robust
from .states import RunOrigin
from .store import StartResult, start_as

__all__ = [
    "MISSED_MAX",
    "PauseResult",
    "Problem",
    "RunNowRefused",
    "drive_schedules",
    "fire_due_schedules",
    "pause",
    "resume",
    "run_now",
    "sync_schedules",
]

logger = logging.getLogger("django_leasejobs")

#: The most missed due times one drive, resume or settle records for a job (S3).
MISSED_MAX = 1000
#: Pause notes are short: they are read in a list (S4).
NOTE_MAX = 200


def _zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def _using() -> str:
    return router.db_for_write(Schedule)


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


class Problem(NamedTuple):
    """A schedule that could not be synced, planned or fired (D6): reported, never raised."""

    job: str
    text: str


def _contained(job: str, problems: list[Problem], work: Callable[[], Any]) -> Any:
    """Run *work* for one schedule; an error is that schedule's alone (D6, like R9 for runs)."""
    try:
        return work()
    except Exception as exc:
        text = describe(exc)
        logger.error("Schedule job=%s could not be handled: %s", job, text)
        problems.append(Problem(job, text))
        return None


def drive_schedules(now: datetime, jobs: set[str] | None) -> list[Problem]:
    """D6, a drive's first phase: sync the rows (S1), fire what is due (S2, S3), send
    ``job_overdue`` (S6). Returns the schedules that could not be handled; every
    other schedule is handled whatever they did.
    """
    problems: list[Problem] = []
    rows = sync_schedules(now, problems)
    fire_due_schedules(now, rows, jobs, problems)
    check_overdue(rows, now, problems)
    return problems


# -- S1: the rows follow the code ------------------------------------------------------


def sync_schedules(now: datetime, problems: list[Problem] | None = None) -> list[Schedule]:
    """Create or update the Schedule rows of the jobs registered here (S1).

    A new schedule is due next after *now*: nothing is owed for a definition
    that did not exist. A changed expression or time zone continues from the
    last due time the row fired (``last_due_at``), so two deployments that
    disagree during a rolling deploy lose no due time of either. Only jobs
    registered in this process are touched: a row of another deployment's job
    is left as it is (it reads as ``orphaned`` once no drive has registered it
    for ``ORPHAN_AFTER``), and a job registered here without a schedule any
    more is disabled, never deleted.

    Returns the rows as they stand, for :func:`fire_due_schedules`: one read
    of the table per drive. A row that cannot be synced is reported in
    *problems* and left as it was.
    """
    problems = [] if problems is None else problems
    rows = {row.job: row for row in Schedule.objects.using(_using())}
    stale = False
    for spec in registry:
        row = rows.get(spec.name)
        if spec.schedule:
            stale |= bool(_contained(spec.name, problems, partial(_sync, spec, row, now)))
        elif row is not None and row.enabled:
            # Registered here, scheduled no more: this code removed the schedule.
            Schedule.objects.using(_using()).filter(pk=row.pk, enabled=True).update(enabled=False)
            logger.warning("Schedule disabled (no longer in the code): %s", spec.name)
            stale = True
    _mark_seen(rows, now)
    return list(Schedule.objects.using(_using())) if stale else list(rows.values())


def _sync(spec: Job, row: Schedule | None, now: datetime) -> bool:
    """Bring one row in line with *spec*; return whether anything was written."""
    assert spec.schedule is not None
    zone = spec.timezone or settings.TIME_ZONE
    if row is None:
        Schedule.objects.using(_using()).get_or_create(
            job=spec.name,
            defaults={
                "expression": spec.schedule,
                "timezone": zone,
                "rule": spec.missed,
                "next_due_at": cron.next_due(spec.schedule, _zone(zone), now),
                "last_due_at": now,  # nothing before the row existed is owed
                "seen_at": now,
            },
        )
        return True
    changed = (row.expression, row.timezone) != (spec.schedule, zone)
    if not (changed or row.rule != spec.missed or not row.enabled):
        return False
    values: dict[str, Any] = {"rule": spec.missed, "enabled": True}
    # Re-enabling an unchanged definition keeps its next due time, so what
    # passed meanwhile goes through the missed-run rule (S3) rather than
    # vanishing. A changed one continues from the last due time fired.
    if changed:
        values |= {
            "expression": spec.schedule,
            "timezone": zone,
            "next_due_at": cron.next_due(spec.schedule, _zone(zone), row.last_due_at or now),
        }
    # Compare-and-set on what was read: a concurrent drive made the same change.
    Schedule.objects.using(_using()).filter(
        pk=row.pk, expression=row.expression, timezone=row.timezone, enabled=row.enabled
    ).update(**values)
    return True


def seen_every() -> timedelta:
    """How often a drive refreshes ``seen_at``: enough for ``ORPHAN_AFTER``, at most hourly."""
    return min(timedelta(hours=1), conf.ORPHAN_AFTER / 4)


def _mark_seen(rows: dict[str, Schedule], now: datetime) -> None:
    """S1: note that a drive registers these jobs -- one statement, at most hourly."""
    since = now - seen_every()
    seen = [
        name
        for name, row in rows.items()
        if name in registry
        and registry.get(name).schedule
        and (row.seen_at is None or row.seen_at < since)
    ]
    if seen:
        Schedule.objects.using(_using()).filter(job__in=seen).update(seen_at=now)
        for name in seen:
            rows[name].seen_at = now


# -- S2, S3: firing due times and the missed-run rules ------------------------------------


@dataclass(frozen=True)
class Window:
    """What a rule does with the due times from a schedule's next due time to now."""

    fire: list[datetime]  # the due times the run it starts covers (oldest first)
    missed: list[datetime]  # the due times recorded in the ledger
    dropped: int  # older missed due times only counted (bounded work)
    caught_up: datetime | None  # the newest missed due time the run serves, if any
    next_due_at: datetime | None


def plan(row: Schedule, now: datetime, cause: str | None) -> Window:
    """Decide what the due times in [``row.next_due_at``, *now*] come to (S2, S3).

    Without a *cause* the due times simply fire (they are within
    ``MISSED_GRACE``). With one -- a drive came late (``worker_down``) or the
    schedule was paused (``paused``) -- the job's rule applies to all of them.

    A ``next_due_at`` off the cron grid (moved by hand, restored, or computed
    under other tzdata) is itself a due time, the oldest; the grid resumes
    after it (D6).
    """
    zone, expression = _zone(row.timezone), row.expression
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
        if _contained(row.job, problems, partial(_fire, row, now)):
            acted.append(row.job)
    return acted


def _fire(row: Schedule, now: datetime) -> bool:
    assert row.next_due_at is not None
    if row.rule == MissedRule.REQUIRED and _has_live_run(row.job):
        return False  # the batch in flight runs first: one required due time after another
    cause = MissedCause.WORKER_DOWN if now - row.next_due_at > conf.MISSED_GRACE else None
    return _act(row, plan(row, now, cause), now)


def _has_live_run(job: str) -> bool:
    return Run.objects.using(_using()).live().filter(job=job).exists()


def _act(row: Schedule, window: Window, now: datetime) -> bool:
    """Move ``next_due_at`` (compare-and-set), record the ledger, start the run: one transaction."""
    using = _using()
    newest = max([*window.fire, *window.missed], default=None)
    with transaction.atomic(using=using):
        won = (
            Schedule.objects.using(using)
            .filter(pk=row.pk, next_due_at=row.next_due_at, enabled=True, paused_at__isnull=True)
            .update(next_due_at=window.next_due_at, last_due_at=newest or row.last_due_at)
        )
        if not won:
            return False
        result = _start_for(row.job, window) if window.fire else None
        if window.missed:
            _record(row, window, result.run if result else None, now)
        if result is not None:
            Schedule.objects.using(using).filter(pk=row.pk).update(
                last_run=result.run, last_run_at=now
            )
    return True


def _start_for(job: str, window: Window) -> StartResult:
    payload = {
        "due": _iso(window.fire[-1]),
        "covers": [_iso(moment) for moment in window.fire],
    }
    # A run still live from an earlier due time is joined with again=True:
    # overlapping firings collapse into one follow-up (S2).
    return start_as(RunOrigin.SCHEDULE, job, payload, again=True)


def cause_of(row: Schedule, moment: datetime) -> str:
    """Why due time *moment* was missed: during the row's last pause, or no drive ran (S3)."""
    paused_from, resumed = row.last_paused_at, row.resumed_at
    if paused_from is not None and resumed is not None and paused_from <= moment <= resumed:
        return MissedCause.PAUSED
    return MissedCause.WORKER_DOWN


def _record(row: Schedule, window: Window, run: Run | None, now: datetime) -> None:
    """Write the Missed ledger; the unique (job, due_at) keeps each due time to one row."""
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
    Missed.objects.using(_using()).bulk_create(rows, ignore_conflicts=True)
    rule, cause = row.rule, rows[-1].cause
    logger.info(
        "Schedule missed job=%s cause=%s rule=%s recorded=%s older=%s",
        row.job,
        cause,
        rule,
        len(rows),
        window.dropped,
    )
    _send(
        signals.schedule_missed,
        row,
        due_times=list(window.missed),
        cause=cause,
        action=MissedAction.SKIPPED if rule == MissedRule.SKIP else MissedAction.CAUGHT_UP,
        dropped=window.dropped,
    )


def _send(signal: Signal, schedule: Schedule, **extra: Any) -> None:
    if signal.has_listeners():
        transaction.on_commit(
            lambda: send_robust(signal, Schedule, schedule=schedule, **extra), using=_using()
        )


# -- S4: pause and resume -------------------------------------------------------------------


@dataclass(frozen=True)
class PauseResult:
    """What pause() or resume() did: ``done`` False means it was so "already"."""

    done: bool
    schedule: Schedule
    missed: int = 0


def _schedule(job: str | Job) -> Schedule:
    name = job.name if isinstance(job, Job) else job
    return Schedule.objects.using(_using()).get(job=name)


def pause(job: str | Job, by: str, note: str = "") -> PauseResult:
    """Pause a schedule (S4): no due time fires until :func:`resume`.

    A compare-and-set: of two pauses, the second answers ``done=False``
    ("already paused"). *note* (at most 200 characters) says why.
    """
    if len(note) > NOTE_MAX:
        raise ValueError(f"a pause note is at most {NOTE_MAX} characters")
    row = _schedule(job)
    now = get_clock().now(_using())
    done = (
        Schedule.objects.using(_using())
        .filter(pk=row.pk, paused_at__isnull=True)
        .update(paused_at=now, paused_by=by, pause_note=note)
    )
    row.refresh_from_db()
    if done:
        logger.info("Schedule paused job=%s by=%s", row.job, by)
    return PauseResult(bool(done), row)


def resume(job: str | Job, by: str) -> PauseResult:
    """Resume a paused schedule (S4), applying its rule to what the pause missed.

    Due times that passed while paused are recorded with cause ``paused`` and
    handled by the job's rule (S3): ``skip`` runs nothing, ``catch_up_once``
    one run now, ``required`` every one of them. A second resume answers
    ``done=False``.
    """
    row = _schedule(job)
    get_job(row.job)  # One this process cannot fire is refused before anything changes.
    using = _using()
    now = get_clock().now(using)
    with transaction.atomic(using=using):
        done = (
            Schedule.objects.using(using)
            .filter(pk=row.pk, paused_at__isnull=False)
            .update(
                last_paused_at=F("paused_at"),
                resumed_at=now,
                paused_at=None,
                paused_by="",
                pause_note="",
            )
        )
        missed = 0
        if done and row.next_due_at is not None and row.next_due_at <= now and row.enabled:
            row.last_paused_at, row.resumed_at, row.paused_at = row.paused_at, now, None
            window = plan(row, now, MissedCause.PAUSED)
            if _act(row, window, now):
                missed = len(window.missed) + window.dropped
    row.refresh_from_db()
    if done:
        logger.info("Schedule resumed job=%s by=%s missed=%s", row.job, by, missed)
    return PauseResult(bool(done), row, missed)


# -- S5: run now -----------------------------------------------------------------------------


class RunNowRefused(Exception):
    """Run now was refused; ``reason`` says why and ``retry_at`` when a place frees up."""

    def __init__(self, reason: str, message: str, retry_at: datetime | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_at = retry_at


def run_now(job: str | Job, by: str) -> StartResult:
    """Start a run by hand, outside the schedule (S5).

    Refused (:class:`RunNowRefused`) for a job that is not safe to repeat,
    for a job with a live run, and past ``HAND_RUNS_PER_HOUR`` hand runs in
    the last hour -- with the time a place frees up.
    """
    spec = get_job(job)
    if not spec.safe_to_repeat:
        raise RunNowRefused(
            "not_safe", f"{spec.name} is not safe to repeat: run it from its schedule"
        )
    using = _using()
    now = get_clock().now(using)
    runs = Run.objects.using(using).filter(job=spec.name)
    if runs.live().exists():
        raise RunNowRefused("live", f"{spec.name} already has a live run")
    recent = list(
        runs.filter(origin=RunOrigin.HAND, started_at__gt=now - timedelta(hours=1))
        .order_by("started_at")
        .values_list("started_at", flat=True)[: conf.HAND_RUNS_PER_HOUR]
    )
    if len(recent) >= conf.HAND_RUNS_PER_HOUR:
        frees = recent[0] + timedelta(hours=1)
        raise RunNowRefused(
            "cap",
            f"{conf.HAND_RUNS_PER_HOUR} hand runs of {spec.name} in the last hour; "
            f"the next is possible at {frees:%H:%M:%S} UTC",
            retry_at=frees,
        )
    result = start_as(RunOrigin.HAND, spec, {"by_hand": by, "at": _iso(now)})
    if result.joined:  # a run went live between the check and the start
        raise RunNowRefused("live", f"{spec.name} already has a live run")
    logger.info("Run started by hand job=%s by=%s run=%s", spec.name, by, result.run.pk)
    return result


# -- S6: states, and job_overdue once per episode --------------------------------------------


class State:
    """What a schedule reads as (S6)."""

    OK = "ok"
    RUNNING = "running"
    RETRYING = "retrying"
    PAUSED = "paused"
    FAILED = "failed"
    STALLED = "stalled"
    MISSED = "missed"
    NEVER_RUN = "never_run"
    #: No drive has registered the job for ``ORPHAN_AFTER`` (S1).
    ORPHANED = "orphaned"
    #: This process cannot read the row: an expression or time zone it cannot
    #: parse (another deployment's newer tzdata), or one that never comes round.
    INVALID = "invalid"

    OVERDUE = frozenset({STALLED, MISSED})


class InvalidSchedule(ValueError):
    """A stored schedule this process cannot plan: its expression or time zone."""


def period(row: Schedule) -> timedelta:
    """The time between two due times around the next one (for "missed": twice this).

    Raises :class:`InvalidSchedule` when the row's expression or time zone
    cannot be planned here.
    """
    try:
        zone = _zone(row.timezone)
        first = row.next_due_at or cron.next_due(row.expression, zone, row.updated_at)
        return cron.next_due(row.expression, zone, first) - first
    except Exception as exc:
        raise InvalidSchedule(problem(row) or describe(exc)) from exc


def problem(row: Schedule) -> str | None:
    """Why this process cannot plan *row*, or ``None`` (D6, A5)."""
    try:
        zone = _zone(row.timezone)
    except Exception:
        return f"unknown time zone {row.timezone!r}"
    try:
        cron.next_due(row.expression, zone, row.next_due_at or row.updated_at)
    except Exception:
        return f"cron expression {row.expression!r} cannot be planned"
    return None


def orphaned(row: Schedule, now: datetime) -> bool:
    """Whether no drive has registered *row*'s job for ``ORPHAN_AFTER`` (S1, S6)."""
    return row.seen_at is not None and now - row.seen_at > conf.ORPHAN_AFTER


def state(row: Schedule, live: Run | None, now: datetime) -> str:
    """Read *row* as one of the S6 states, given its live run (if any) at *now*."""
    if orphaned(row, now):
        return State.ORPHANED
    if row.paused_at is not None:
        return State.PAUSED
    if live is not None:
        spec = registry.get(row.job) if row.job in registry else None
        stall_after = (spec.stall_after if spec else None) or conf.STALL_AFTER
        if now - live.started_at > stall_after:
            return State.STALLED
        return State.RETRYING if live.attempts else State.RUNNING
    if row.last_run_at is None and row.last_success_at is None:
        return State.INVALID if problem(row) else State.NEVER_RUN
    if row.last_outcome == "failed":
        return State.FAILED
    try:
        twice = 2 * period(row)
    except InvalidSchedule:
        return State.INVALID
    if row.last_success_at is None or now - row.last_success_at > twice:
        return State.MISSED
    return State.OK


def live_runs(jobs: list[str]) -> dict[str, Run]:
    """The live run of each of *jobs* (at most one each, R1): what :func:`state` reads of it."""
    live = Run.objects.using(_using()).live().filter(job__in=jobs)
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
        _contained(row.job, problems, partial(_watch, row, live.get(row.job), now))


def _watch(row: Schedule, live: Run | None, now: datetime) -> None:
    current = state(row, live, now)
    same = Schedule.objects.using(_using()).filter(pk=row.pk)
    if current in State.OVERDUE and row.overdue_since is None:
        if same.filter(overdue_since__isnull=True).update(overdue_since=now):
            logger.warning("Job overdue job=%s state=%s", row.job, current)
            _send(signals.job_overdue, row, state=current)
    elif current not in State.OVERDUE and row.overdue_since is not None:
        same.filter(overdue_since__isnull=False).update(overdue_since=None)


def record_outcome(run: Run, status: str) -> None:
    """Note a scheduled run's final outcome on its schedule (S6): one statement."""
    values: dict[str, Any] = {"last_outcome": status}
    if status == "done":
        values["last_success_at"] = get_clock().now_expr()  # the database's time, no read
    Schedule.objects.using(_using()).filter(job=run.job).update(**values)
