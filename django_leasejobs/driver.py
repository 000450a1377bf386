"""The drive: pick due runs, claim each, run its passes, report (SPEC D1-D6).

No SQL here: the due read is a queryset method and every write is the store's.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from django.db import DatabaseError, router
from django.db.models import BooleanField, ExpressionWrapper, Q

from . import retention, schedules, store
from .clock import get_clock
from .conf import conf
from .errors import connection_lost, describe, one_line
from .execute import Outcome, Throttled, drive_run
from .holder import current_holder, is_gone
from .models import Run
from .pacing import Claims, pace
from .querysets import RunQuerySet
from .reading import stranded
from .registry import Job, registry
from .report import DriveReport, Note
from .routing import queue_problem
from .states import PassOutcome
from .store.compiled import Select

__all__ = ["DriveReport", "Note", "drive_for", "run_due_jobs"]

logger = logging.getLogger("django_leasejobs")


class DueKey(NamedTuple):
    id: str
    job: str
    took_over: bool
    #: The run's ``limit_key`` ("" for none): which limits it counts against (§14).
    limit_key: str = ""


def _of(runs: RunQuerySet, names: tuple[str, ...], queues: tuple[str, ...] | None) -> RunQuerySet:
    """Runs of the jobs *names* and, when given, of the *queues* only (D2, W4)."""
    runs = runs.filter(job__in=names)
    return runs if queues is None else runs.filter(queue__in=queues)


#: D1's read: the ids, jobs and lease forms of up to *scan_max* due runs of
#: *names* (and *queues*), highest priority first (D7).
SNAPSHOT = Select(
    lambda runs, s, names, queues, scan_max: (
        _of(runs.due(s.now), names, queues)
        # Whether a lease began, not when: a date the database cannot hand
        # back (R9, §12) must not stop the snapshot of every other run.
        .annotate(began=ExpressionWrapper(Q(lease_began_at__isnull=False), BooleanField()))
        .values_list("id", "job", "began", "limit_key")[:scan_max]
    )
)


def _snapshot(jobs: Iterable[Job], queues: tuple[str, ...] | None, scan_max: int) -> list[DueKey]:
    """D1: one read of up to *scan_max* due runs of *jobs*, in the due index's order.

    The job and queue filters are in the query, so runs of jobs this process
    does not register (another deployment's work, D2) or of queues it does
    not take (W4) neither fill the snapshot nor starve the runs behind them.
    Compiled once per set of jobs and queues (§13).
    """
    names = tuple(spec.name for spec in jobs)
    if not names:
        return []
    rows = SNAPSHOT.rows(router.db_for_read(Run), names, queues, scan_max)
    return [DueKey(run_id, job, bool(began), key or "") for run_id, job, began, key in rows]


def _fire_schedules(using: str, jobs: set[str] | None, report: DriveReport) -> None:
    """D6: fire the due schedules (of *jobs*); each problem is reported, never raised."""
    now = get_clock().now(using)
    for problem in schedules.drive_schedules(now, jobs):
        report.errors.append(Note("", f"schedule {problem.job!r}: {problem.text}"))


def _bounds(limit: int | None, max_passes: int | None) -> tuple[int, int]:
    """The drive's limit and passes per run: as given, or the settings' (D2, D3)."""
    limit = conf.DRIVE_LIMIT if limit is None else limit
    max_passes = conf.MAX_PASSES if max_passes is None else max_passes
    if limit < 1 or max_passes < 1:
        raise ValueError("limit and max_passes must be at least 1")
    return limit, max_passes


def _queues(queues: Iterable[str] | None) -> tuple[str, ...] | None:
    """The queues to drive, sorted (one compiled read per set), or ``None`` for every one."""
    if queues is None:
        return None
    if isinstance(queues, str):
        raise TypeError("queues must be a list of queue names, not one str")
    names = tuple(sorted(set(queues)))
    if not names:
        raise ValueError("queues must name at least one queue; leave it out for every queue")
    for name in names:
        if problem := queue_problem("queues", name):
            raise ValueError(problem)
    return names


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
    lambda runs, s, names, queues, prefix, scan_max: (
        _of(runs.leased(s.now), names, queues)
        .filter(lease_holder__startswith=prefix)
        .values_list("id", "lease_owner", "lease_holder")[:scan_max]
    )
)


def _release_dead_holders(
    jobs: Iterable[Job], queues: tuple[str, ...] | None, scan_max: int, report: DriveReport
) -> None:
    """L9: make runs leased by a provably dead process on this host due now.

    Without this a SIGKILLed worker's runs wait out their whole lease; with it
    the next drive on the same host takes them over at once (charged as any
    takeover). Another host's holders are never judged: see :mod:`.holder`.
    """
    names = tuple(spec.name for spec in jobs)
    host = current_holder().split(":", 1)[0]
    if not names:
        return
    leased = DEAD_HOLDERS.rows(router.db_for_read(Run), names, queues, f"{host}:", scan_max)
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
    queues: Iterable[str] | None = None,
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
    queues:
        Only runs of these queues (W4); default every queue. Runs of other
        queues are stepped over, as runs of jobs not registered here are.
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
    limit, max_passes = _bounds(limit, max_passes)
    stop = stop or (lambda: False)
    specs = _registered(jobs)
    by_name = {spec.name: spec for spec in specs}

    report = DriveReport()
    using = router.db_for_write(Run)
    # D6: schedules first, so a due time fired now is driven in this drive.
    _fire_schedules(using, None if jobs is None else set(by_name), report)
    taken = _queues(queues)
    _release_dead_holders(specs, taken, conf.SCAN_MAX, report)
    keys = _snapshot(specs, taken, conf.SCAN_MAX)
    claims = Claims()  # runs claimed ahead of their turn, while passes are short (§13)
    limited = Limited()  # keys this drive found at their limit, and their runs it held back
    position = 0
    while position < len(keys) and report.attempted < limit and not stop():
        key = keys[position]
        position += 1
        spec = by_name[key.job]
        if spec.limit is not None and limited.holds_back(key):
            continue  # C4: not claimed only to be throttled; held back below, in one statement
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
            if outcomes and outcomes[0].status != PassOutcome.THROTTLED:
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
        _tally(report, key, outcomes, limited)
    if not report.aborted:
        _let_go(claims, limited, report)
    _housekeeping(report)
    logger.debug("Drive finished %s", report.summary())
    return report


def _let_go(claims: Claims, limited: Limited, report: DriveReport) -> None:
    """The drive's end: runs claimed ahead and not reached given back, limited ones held back."""
    claims.give_back()
    report.throttled += limited.hold_back(report)


def _tally(report: DriveReport, key: DueKey, outcomes: list[Outcome], limited: Limited) -> None:
    """Count one run's passes; a throttled one ran nothing, so it is not ``attempted`` (C4)."""
    report.attempted += any(outcome.status != PassOutcome.THROTTLED for outcome in outcomes)
    for outcome in outcomes:
        report.tally(key.id, outcome)
        if outcome.throttle is not None:
            limited.reached(key.job, outcome.throttle)


class Limited:
    """The keys one drive found at their limit (§14), and the due runs of theirs it stepped over.

    Once a pass of a key was throttled, the key's other runs in the snapshot
    would be too: claiming each only to let it go costs three statements a
    run. The drive steps over them instead and, at its end, moves them all to
    the throttled run's new due time in one statement (:func:`store.hold_back`),
    so they neither fill the next snapshot nor keep the runs behind them
    waiting (C4).
    """

    def __init__(self) -> None:
        self._reached: dict[tuple[str, str], Throttled] = {}
        self._held: dict[tuple[str, str], list[str]] = {}

    def reached(self, job: str, throttled: Throttled) -> None:
        self._reached[(job, throttled.key)] = throttled

    def holds_back(self, key: DueKey) -> bool:
        """Whether *key*'s run belongs to a key at its limit (and is now held back)."""
        found = (key.job, key.limit_key)
        if found not in self._reached or key.took_over:
            return False  # a takeover is claimed: its charge is due whatever the limit
        self._held.setdefault(found, []).append(key.id)
        return True

    def hold_back(self, report: DriveReport) -> int:
        """Move the runs stepped over; return how many moved. Never fails the drive."""
        moved = 0
        for found, ids in self._held.items():
            throttled = self._reached[found]
            try:
                moved += store.hold_back(ids, throttled.which, throttled.until, throttled.wait)
            except DatabaseError as exc:
                report.errors.append(Note("", f"limited runs not held back: {describe(exc)}"))
        return moved


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
