"""The drive: pick due runs, claim each, run its passes, report (SPEC D1-D7, W5, C5).

No SQL here: the due read is a queryset method and every write is the store's.
A drive fires the due schedules, re-judges the limits a deploy changed, reads
the snapshot, walks it (:mod:`.cursor`: on this thread, or onto a pool of
threads), and does the per-process chores (:mod:`.housekeeping`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from types import MappingProxyType

from django.db import DatabaseError, connections, router
from django.db.models import BooleanField, ExpressionWrapper, Q
from django.db.transaction import TransactionManagementError

from . import schedules, store
from .bookkeeper import Bookkeeper
from .clock import get_clock
from .conf import conf
from .cursor import DueCursor, drive_on_this_thread
from .dispatcher import Dispatcher
from .due import DriveOptions, DueKey
from .errors import connection_lost, describe, drop_lost_connections
from .holder import current_holder, is_gone
from .housekeeping import chores
from .models import Run
from .registry import Job, registry
from .rejudging import rejudge_limits
from .report import DriveReport, Note
from .routing import queue_problem
from .store.lock_waits import lock_wait_bounded
from .store.sql import Select
from .store.unanswered import give_back_unanswered

__all__ = ["DriveReport", "Note", "run_due_jobs", "wait_for_passes"]

logger = logging.getLogger("django_leasejobs")


#: D1's read: the ids, jobs, lease forms, limit keys and queues of up to *scan_max* due runs of
#: *names* (and *queues*), highest priority first (D7).
SNAPSHOT = Select(
    lambda runs, s, names, queues, scan_max: (
        runs.due(s.now)
        .of_jobs(names, queues)
        .unpaused()  # W6: a paused queue's runs are stepped over, as D2's are
        # Whether a lease began, not when: a date the database cannot hand
        # back (R9, §12) must not stop the snapshot of every other run.
        .annotate(began=ExpressionWrapper(Q(lease_began_at__isnull=False), BooleanField()))
        .values_list("id", "job", "began", "limit_key", "queue")[:scan_max]
    )
)


def snapshot(jobs: Iterable[Job], queues: tuple[str, ...] | None, scan_max: int) -> list[DueKey]:
    """D1: one read of up to *scan_max* due runs of *jobs*, in the due index's order.

    The job and queue filters are in the query, so runs of jobs this process
    does not register (another deployment's work, D2) or of queues it does
    not take (W4) neither fill the snapshot nor starve the runs behind them.
    Compiled once per set of jobs and queues (§13).
    """
    names = tuple(spec.name for spec in jobs)
    if not names:
        return []
    # The due read may follow a router to a replica (§12): a lagging
    # snapshot only delays pick-up, as every claim re-tests due-ness where it writes.
    rows = SNAPSHOT.rows(router.db_for_read(Run), names, queues, scan_max)
    return [
        DueKey(run_id, job, bool(began), key or "", queue)
        for run_id, job, began, key, queue in rows
    ]


def _fire_schedules(using: str, jobs: set[str] | None, report: DriveReport) -> None:
    """D6: fire the due schedules (of *jobs*); each problem is reported, never raised.

    The schedules' table locked (a migration, ``VACUUM FULL``) costs this
    phase, not the drive (F11): it gives up after a moment, the runs are
    driven, and the next drive fires what is due, late but once (S2, S3).
    """
    now = get_clock().now(using)
    try:
        with lock_wait_bounded(using):
            problems = schedules.handle_schedules(now, jobs)
    except DatabaseError as exc:
        if connection_lost(using):
            raise  # an outage: the drive cannot run (D4)
        report.warnings.append(Note("", f"schedules not handled in this drive: {describe(exc)}"))
        logger.warning("Schedules not handled in this drive (%s)", describe(exc))
        return
    for problem in problems:
        report.errors.append(Note("", f"schedule {problem.job!r}: {problem.text}"))


def _bounds(limit: int | None, max_passes: int | None) -> tuple[int, int]:
    """The drive's limit and passes per run: as given, or the settings' (D2, D3)."""
    limit = conf.DRIVE_LIMIT if limit is None else limit
    max_passes = conf.MAX_PASSES if max_passes is None else max_passes
    if limit < 1 or max_passes < 1:
        raise ValueError("limit and max_passes must be at least 1")
    return limit, max_passes


def queue_names(queues: Iterable[str] | None) -> tuple[str, ...] | None:
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


def registered(jobs: Iterable[str] | None) -> list[Job]:
    """The jobs to drive: *jobs*, or every one registered; an unknown name is refused."""
    if jobs is None:
        return list(registry)
    wanted = set(jobs)
    specs = [spec for spec in registry if spec.name in wanted]
    unknown = wanted - {spec.name for spec in specs}
    if unknown:
        registry.get(sorted(unknown)[0])  # raises JobNotRegistered, listing the jobs
    return specs


#: L9's read: runs of *names* leased by a process of this host (*prefix*).
DEAD_HOLDERS = Select(
    lambda runs, s, names, queues, prefix, scan_max: (
        runs.leased(s.now)
        .of_jobs(names, queues)
        .claimed_on_host(prefix)
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
    # Judged where the leases are written (§12): a replica's lag would show a lease
    # the holder has since renewed or let go.
    leased = DEAD_HOLDERS.rows(store.alias(), names, queues, f"{host}:", scan_max)
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
    concurrency: int | None = None,
    stop: Callable[[], bool] | None = None,
    interrupt: Callable[[], bool] | None = None,
    dispatcher: Dispatcher | None = None,
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
    concurrency:
        Passes run at once, each on a thread and a database connection of
        its own (W5); defaults to ``LEASEJOBS["CONCURRENCY"]`` (1: one after
        another on this thread, as ever). With more, call it outside any
        transaction: the passes write on their own connections.
    stop:
        Asked between passes; when it answers ``True`` the drive ends after the
        pass in flight (graceful shutdown).
    interrupt:
        Asked at every step boundary; when it answers ``True`` the pass in
        flight is released there, uncharged (a shutdown past its stop timeout).
    dispatcher:
        With ``concurrency`` above 1, the :class:`~.dispatcher.Dispatcher` (and
        its pool of threads) to drive on, kept by a ``--loop`` worker across
        its drives; its passes may still run when this returns. Default: one
        made for this call, which waits for every pass and closes its pool.

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
    concurrency = concurrency_of(concurrency)
    specs = registered(jobs)
    by_name = {spec.name: spec for spec in specs}
    using = router.db_for_write(Run)
    if concurrency > 1 and connections[using].in_atomic_block:
        raise TransactionManagementError(
            "run_due_jobs(concurrency=N) runs its passes on connections of their own, "
            "which cannot see this transaction: call it outside one"
        )

    report = DriveReport()
    # D6: schedules first, so a due time fired now is driven in this drive.
    _fire_schedules(using, None if jobs is None else set(by_name), report)
    taken = queue_names(queues)
    _before_snapshot(specs, taken, report)
    options = DriveOptions(
        using,
        MappingProxyType(by_name),
        max_passes,
        stop or (lambda: False),
        interrupt,
    )
    cursor = DueCursor(
        snapshot(specs, taken, conf.SCAN_MAX), options, limit=limit, books=Bookkeeper(report)
    )
    if concurrency == 1:
        drive_on_this_thread(cursor)
    elif dispatcher is not None:
        dispatcher.hand_out(cursor, options, wait=False)
    else:
        own = Dispatcher(concurrency)
        try:
            own.hand_out(cursor, options, wait=True)
        finally:
            own.close()
    # F4: a connection the database ended during the drive is opened anew for what follows;
    # F3: what the drive abandoned on it is given back, if the database answers.
    drop_lost_connections()
    give_back_unanswered()
    chores.run(report)
    logger.debug("Drive finished %s", report.summary())
    return report


def wait_for_passes(
    dispatcher: Dispatcher, give_up: Callable[[], bool] | None = None
) -> DriveReport:
    """Wait for *dispatcher*'s passes in flight; return the report of their outcomes (W5).

    Once *give_up* says so, those still running are abandoned (F13).
    """
    report = DriveReport()
    options = DriveOptions(router.db_for_write(Run), MappingProxyType({}), 1, lambda: False)
    cursor = DueCursor([], options, limit=1, books=Bookkeeper(report))
    dispatcher.wait_for_passes(cursor, give_up)
    cursor.end()
    return report


def concurrency_of(concurrency: int | None) -> int:
    """Passes at once (W5): as given, or ``LEASEJOBS["CONCURRENCY"]``; refused unless >= 1."""
    concurrency = conf.CONCURRENCY if concurrency is None else concurrency
    if type(concurrency) is not int or concurrency < 1:
        raise ValueError(f"concurrency must be an int of at least 1, got {concurrency!r}")
    return concurrency


def _before_snapshot(specs: list[Job], queues: tuple[str, ...] | None, report: DriveReport) -> None:
    """What may make runs due now, done before the snapshot reads them (C5, L9, F3)."""
    give_back_unanswered()
    rejudge_limits(specs, report)
    _release_dead_holders(specs, queues, conf.SCAN_MAX, report)
