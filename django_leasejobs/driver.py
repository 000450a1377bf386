"""The drive: pick due runs, claim each, run its passes, report (SPEC D1-D6).

No SQL here: the due read is a queryset method and every write is the store's.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from django.db import DatabaseError, router
from django.db.models import BooleanField, ExpressionWrapper, Q

from . import retention, schedules, store
from .clock import get_clock
from .conf import conf
from .errors import connection_lost, describe, one_line
from .execute import Outcome, drive_run
from .holder import current_holder, is_gone
from .models import Run
from .pacing import Claims, pace
from .reading import stranded
from .registry import Job, registry
from .states import PassOutcome
from .store.compiled import Select

__all__ = ["DriveReport", "Note", "drive_for", "run_due_jobs"]

logger = logging.getLogger("django_leasejobs")


class Note(NamedTuple):
    """An error or warning about one run, for the report."""

    run_id: str
    text: str


@dataclass
class DriveReport:
    """What one drive did. Failed runs are data here, never exceptions.

    One count per :class:`~django_leasejobs.states.PassOutcome`.
    """

    attempted: int = 0
    advanced: int = 0
    completed: int = 0
    retrying: int = 0
    failed: int = 0
    superseded: int = 0
    deferred: int = 0
    held: int = 0
    errors: list[Note] = field(default_factory=list)
    warnings: list[Note] = field(default_factory=list)
    #: Set when the drive stopped early because the database went away.
    aborted: str = ""

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["errors"] = [note._asdict() for note in self.errors]
        data["warnings"] = [note._asdict() for note in self.warnings]
        return data

    def tally(self, run_id: str, outcome: Outcome) -> None:
        """Count one pass's outcome, and note its error or warning."""
        field = _COUNTS[outcome.status]
        setattr(self, field, getattr(self, field) + 1)
        if outcome.error and outcome.status in _REPORTED:
            self.errors.append(Note(run_id, outcome.error))
        if outcome.warning:
            self.warnings.append(Note(run_id, outcome.warning))

    def merge(self, other: DriveReport) -> None:
        """Add *other*'s counts and notes to this report: several drives read as one (W3)."""
        for name in ("attempted", *_COUNTS.values()):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.errors += other.errors
        self.warnings += other.warnings
        self.aborted = self.aborted or other.aborted

    def summary(self) -> str:
        counts = " ".join(
            f"{name}={getattr(self, name)}" for name in ("attempted", *_COUNTS.values())
        )
        return f"{counts} errors={len(self.errors)} warnings={len(self.warnings)}"


#: The report's count for each pass outcome: its field is named after it.
_COUNTS = {outcome: str(outcome.value) for outcome in PassOutcome}
#: Outcomes whose error is a run's failure the report lists (a retry, a failure, a hold).
_REPORTED = frozenset({PassOutcome.RETRYING, PassOutcome.FAILED, PassOutcome.HELD})


class DueKey(NamedTuple):
    id: str
    job: str
    took_over: bool


#: D1's read: the ids, jobs and lease forms of up to *scan_max* due runs of *names*.
SNAPSHOT = Select(
    lambda runs, s, names, scan_max: (
        runs.due(s.now)
        .filter(job__in=names)
        # Whether a lease began, not when: a date the database cannot hand
        # back (R9, §12) must not stop the snapshot of every other run.
        .annotate(began=ExpressionWrapper(Q(lease_began_at__isnull=False), BooleanField()))
        .values_list("id", "job", "began")[:scan_max]
    )
)


def _snapshot(jobs: Iterable[Job], scan_max: int) -> list[DueKey]:
    """D1: one index-range read of up to *scan_max* due runs of *jobs*, in due order.

    The job filter is in the query, so runs of jobs this process does not
    register (another deployment's work, D2) neither fill the snapshot nor
    starve the runs behind them. Compiled once per set of jobs (§13).
    """
    names = tuple(spec.name for spec in jobs)
    if not names:
        return []
    rows = SNAPSHOT.rows(router.db_for_read(Run), names, scan_max)
    return [DueKey(run_id, job, bool(began)) for run_id, job, began in rows]


def _fire_schedules(using: str, jobs: set[str] | None, report: DriveReport) -> None:
    """D6: fire the due schedules (of *jobs*); each problem is reported, never raised."""
    now = get_clock().now(using)
    for problem in schedules.drive_schedules(now, jobs):
        report.errors.append(Note("", f"schedule {problem.job!r}: {problem.text}"))


def _registered(jobs: Iterable[str] | None) -> list[Job]:
    """The jobs to drive: *jobs*, or every one registered; an unknown name is refused."""
    if jobs is None:
        return list(registry)
    wanted = set(jobs)
    specs = [spec for spec in registry if spec.name in wanted]
    unknown = wanted - {spec.name for spec in specs}
    if unknown:
        registry.get(sorted(unknown)[0])  # raises JobNotRegistered, listing the jobs
    return specs


def _fresh(keys: list[DueKey], start: int, spec: Job, most: int) -> list[str]:
    """Up to *most* ids of *spec*'s runs from *start* on, in a row, none a takeover (L3).

    What a drive may claim ahead in one statement: a takeover is claimed alone.
    """
    ids = []
    for key in keys[start : start + most]:
        if key.job != spec.name or key.took_over:
            break
        ids.append(key.id)
    return ids


def _away(position: int, length: int) -> int:
    """Where to go on in the snapshot after a lost claim at ``position - 1``.

    A lost claim means another worker is driving this stretch of the same
    due order, one run ahead. Going on with the next run would lose it again,
    and every other claim after it, in lockstep: half of all claims lost with
    two workers. Jumping to a random point further on lets the two drift
    apart; the runs stepped over are the ones the other worker is taking
    (and the next snapshot reads any it left).
    """
    rest = length - position
    return position + random.randrange(rest // 2) if rest > 1 else position


#: L9's read: runs of *names* leased by a process of this host (*prefix*).
DEAD_HOLDERS = Select(
    lambda runs, s, names, prefix, scan_max: (
        runs.leased(s.now)
        .filter(job__in=names, lease_holder__startswith=prefix)
        .values_list("id", "lease_owner", "lease_holder")[:scan_max]
    )
)


def _release_dead_holders(jobs: Iterable[Job], scan_max: int, report: DriveReport) -> None:
    """L9: make runs leased by a provably dead process on this host due now.

    Without this a SIGKILLed worker's runs wait out their whole lease; with it
    the next drive on the same host takes them over at once (charged as any
    takeover). Another host's holders are never judged: see :mod:`.holder`.
    """
    names = tuple(spec.name for spec in jobs)
    host = current_holder().split(":", 1)[0]
    if not names:
        return
    leased = DEAD_HOLDERS.rows(router.db_for_read(Run), names, f"{host}:", scan_max)
    for run_id, owner, holder in leased:
        if owner and is_gone(holder) and store.release_dead_holder(run_id, owner, holder):
            note = f"lease of {holder} released early: that process is gone"
            logger.warning("Run id=%s %s", run_id, note)
            report.warnings.append(Note(run_id, note))


def run_due_jobs(
    *,
    limit: int | None = None,
    max_passes: int | None = None,
    jobs: Iterable[str] | None = None,
    stop: Callable[[], bool] | None = None,
    interrupt: Callable[[], bool] | None = None,
) -> DriveReport:
    """Drive the due runs once (what ``manage.py rundueJobs`` calls).

    Parameters
    ----------
    limit:
        Runs to take on (D2: counted in runs this drive claimed, not rows read).
        Defaults to ``LEASEJOBS["DRIVE_LIMIT"]`` (50).
    max_passes:
        Passes per run (D3); defaults to ``LEASEJOBS["MAX_PASSES"]`` (1).
    jobs:
        Only these job names; default every job registered in this process.
        Runs of jobs not registered here are never touched.
    stop:
        Asked between passes; when it answers ``True`` the drive ends after the
        pass in flight (graceful shutdown).
    interrupt:
        Asked at every step boundary; when it answers ``True`` the pass in
        flight is released there, uncharged (a shutdown past its stop timeout).

    Returns
    -------
    DriveReport
        Counts of pass outcomes plus errors and warnings per run.

    Raises
    ------
    django.db.DatabaseError
        Only when the due read itself fails (the drive could not run at all).
    """
    limit = conf.DRIVE_LIMIT if limit is None else limit
    max_passes = conf.MAX_PASSES if max_passes is None else max_passes
    if limit < 1 or max_passes < 1:
        raise ValueError("limit and max_passes must be at least 1")
    stop = stop or (lambda: False)
    specs = _registered(jobs)
    by_name = {spec.name: spec for spec in specs}

    report = DriveReport()
    using = router.db_for_write(Run)
    # D6: schedules first, so a due time fired now is driven in this drive.
    _fire_schedules(using, None if jobs is None else set(by_name), report)
    _release_dead_holders(specs, conf.SCAN_MAX, report)
    keys = _snapshot(specs, conf.SCAN_MAX)
    claims = Claims()  # runs claimed ahead of their turn, while passes are short (§13)
    position = 0
    while position < len(keys) and report.attempted < limit and not stop():
        key = keys[position]
        position += 1
        spec = by_name[key.job]
        try:
            most = min(pace.batch(spec), limit - report.attempted)
            claimed, lost = claims.turn(key.id, _fresh(keys, position - 1, spec, most), spec)
            if lost:
                if not claims:  # the batch won nothing: another worker is on this stretch
                    position = _away(position, len(keys))
                continue
            started = time.monotonic()
            outcomes = drive_run(
                key.id,
                spec,
                took_over=key.took_over,
                max_passes=max_passes,
                stop=stop,
                interrupt=interrupt,
                claimed=claimed,
            )
            if outcomes:
                pace.observe(spec.name, time.monotonic() - started)
        except DatabaseError as exc:
            report.errors.append(Note(key.id, describe(exc)))
            if connection_lost(using):
                # The pass in flight is abandoned (its lease will expire) and
                # the rest of the drive waits for the next.
                report.aborted = one_line(exc)
                logger.error("Drive aborted: database error on run id=%s (%s)", key.id, type(exc))
                break
            continue  # D4: this run only -- a deadlock or a refused row is not an outage
        except Exception as exc:  # nothing one run does stops the drive (R9)
            logger.exception("Run id=%s could not be driven", key.id)
            report.errors.append(Note(key.id, describe(exc)))
            continue
        if not outcomes:
            position = _away(position, len(keys))
        report.attempted += bool(outcomes)
        for outcome in outcomes:
            report.tally(key.id, outcome)
    if not report.aborted:
        claims.give_back()
    _housekeeping(report)
    logger.debug("Drive finished %s", report.summary())
    return report


def drive_for(seconds: float, **options: Any) -> DriveReport:
    """Drive again while the last drive did work, for at most *seconds* (W3, ``--max-seconds``).

    Returns the drives' combined report. No pass begins once *seconds* have
    passed since the call; one already running then finishes. The first drive
    that finds nothing due ends it early, so a cron line ``rundueJobs
    --max-seconds 55`` empties a backlog in the minute it was started in and
    exits as soon as there is nothing left.
    """
    deadline = time.monotonic() + seconds
    combined = DriveReport()
    while True:
        report = run_due_jobs(stop=lambda: time.monotonic() >= deadline, **options)
        combined.merge(report)
        if not report.attempted or report.aborted or time.monotonic() >= deadline:
            return combined


#: When this process last pruned and last looked after keys (monotonic seconds).
_last_prune: float | None = None
_last_sweep: float | None = None
PRUNE_EVERY = 3600.0
SWEEP_EVERY = 60.0


def _housekeeping(report: DriveReport) -> None:
    """D6: after driving runs, the per-process chores, each at most so often.

    Every minute: free the keys of runs cancelled mid-pass whose worker died
    (§3 ``cancel``), and report rows stranded by hand edits (§11). Every hour:
    prune old finished runs (S7). Housekeeping never fails a drive.
    """
    global _last_prune, _last_sweep  # noqa: PLW0603 - per-process timers, deliberately
    clock = time.monotonic()
    if _last_sweep is None or clock - _last_sweep >= SWEEP_EVERY:
        _last_sweep = clock
        try:
            store.release_expired_cancels(conf.SCAN_MAX)
            for run_id, text in stranded(conf.SCAN_MAX):
                logger.warning("Run id=%s is stranded: %s", run_id, text)
                report.warnings.append(Note(run_id, f"stranded: {text}"))
        except DatabaseError as exc:
            logger.error("Key housekeeping could not run: %s", describe(exc))
    if _last_prune is None or clock - _last_prune >= PRUNE_EVERY:
        _last_prune = clock
        try:
            retention.prune()
        except DatabaseError as exc:
            logger.error("Retention could not run: %s", describe(exc))
