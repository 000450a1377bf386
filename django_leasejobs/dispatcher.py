"""The pool side of a drive (SPEC W5): the snapshot walked here, its runs' passes on threads.

A :class:`Dispatcher` walks a drive's snapshot (:class:`~.cursor.DueCursor`) in
its order and hands each run's passes to a :class:`~.pool.Pool` of threads
-- each with a database connection of its own, each pass under its own
owner token -- and goes on while they run: up to N passes at once, every
rule of a pass unchanged. A slow pass holds one thread, never the runs
behind it while another is free.

The threads claim, each on its own connection; this thread only hands the
runs out. A run of a job with slow or unknown passes goes alone, and its
thread claims it (L2) or takes it over (L3). The runs of a job whose passes
are short go as a *stretch*: a few of them in a row, which the thread claims
in one statement and drives one after another, exactly as a drive at
``concurrency=1`` drives its claims made ahead (§13). So the claims' round
trips overlap with the other threads' passes instead of queueing here, a
call waiting in the backlog holds no lease, and the dispatcher's own work is
one hand-off per call, not per pass.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from django.db import DatabaseError, connections

from .cursor import DueCursor
from .due import DueKey
from .errors import connection_lost, describe
from .follower import Follower
from .in_turn import NOT_WON, REFUSED, SKIPPED, Ran, drive_in_turn
from .leases import Claimed
from .pacing import Claims
from .pool import Abandoned, Pool, Unstarted
from .report import Note

if TYPE_CHECKING:
    from .registry import Job

__all__ = ["WAIT_SLICE", "Dispatcher"]

logger = logging.getLogger("django_leasejobs")

#: How long the dispatcher waits for a pass to end before it looks at the clock again.
WAIT_SLICE = 0.5


#: The drive's warning for a pass abandoned on its thread (F13).
_ABANDONED = (
    "pass abandoned: its handler did not return past its timeout; its thread is replaced "
    "and its lease expires (F13)"
)

#: The drive's warning, once, when a thread found connections refused (F10).
_REFUSED_NOTE = (
    "a pass thread got no database connection (refused): its runs stay due, uncharged, "
    "and the threads that have one go on (F10)"
)


class _Unclaimed:
    """The ids of the runs handed to the pool whose thread has not claimed them yet.

    The dispatcher adds them and the threads take theirs out as they claim
    (and the dispatcher when it collects), so both hold the lock.
    """

    def __init__(self) -> None:
        self._ids: set[str] = set()
        self._lock = threading.Lock()

    def __contains__(self, run_id: object) -> bool:
        with self._lock:
            return run_id in self._ids

    def add(self, keys: list[DueKey]) -> None:
        with self._lock:
            self._ids.update(key.id for key in keys)

    def discard(self, keys: list[DueKey]) -> None:
        with self._lock:
            self._ids.difference_update(key.id for key in keys)


class Dispatcher:
    """Drives the snapshot's runs on a pool of *concurrency* threads (W5).

    Made for one call of ``run_due_jobs(concurrency=N)``, or kept by a
    ``--loop`` worker (and by ``--max-seconds``) across its drives, so that
    the pool's threads and their connections are kept too (§13). A pass may
    still run when its drive ends: the worker's next drive goes on beside
    it, and its outcome is counted in the report of the drive it ended in.
    :meth:`wait_for_passes` waits for every pass in flight.
    """

    def __init__(self, concurrency: int) -> None:
        # A backlog of one call per thread: a thread that frees starts its next run at
        # once, not after the dispatcher's own round trip (§13). It holds no lease.
        self.pool = Pool(concurrency, backlog=concurrency)
        #: Whether the last drive handed any pass to a thread: it did work (W1, W3).
        self.dispatched = False
        #: The calls in flight: their runs, and the drive they were started in.
        self._flying: dict[int, tuple[list[DueKey], DueCursor]] = {}
        #: The runs handed to a thread that has not claimed them yet (in the backlog).
        self._handed = _Unclaimed()
        self._tokens = 0

    def hand_out(self, cursor: DueCursor, *, wait: bool) -> None:
        """Hand the snapshot's runs to the pool; with *wait*, until every pass has ended."""
        self.dispatched = False
        self._collect(cursor, timeout=0)
        while not cursor.options.stop():
            # Every thread busy and the backlog full. A call waiting in the backlog holds
            # no claim -- its thread claims when it takes it -- so a thread that frees
            # starts its next pass at once, and no lease waits out a slow pass.
            if not self.pool.room():
                self._collect(cursor, timeout=WAIT_SLICE)
                continue
            key = cursor.next()
            if key is None:
                break
            if key.id in self._handed:
                # Handed to a thread by an earlier drive and waiting for it, unclaimed, so
                # still due in this drive's snapshot: not handed over twice.
                continue
            self._start(cursor, key)
            self._collect(cursor, timeout=0)
        if wait:
            self.wait_for_passes(cursor)
        cursor.end()

    def wait_for_passes(self, cursor: DueCursor, give_up: Callable[[], bool] | None = None) -> None:
        """Wait for every pass in flight, counting each in *cursor*'s report.

        Once *give_up* says so (the worker's ``--stop-timeout`` has passed),
        the passes still in flight are abandoned (F13): their leases expire.
        """
        while self.pool.busy:
            if give_up is not None and give_up():
                self.pool.give_up()
            self._collect(cursor, timeout=WAIT_SLICE)

    @property
    def abandoned(self) -> int:
        """Threads given up on a hung pass (F13) that still run it."""
        return self.pool.abandoned

    def scarce(self, scarce: bool = True) -> None:
        """Connections are refused (F10): the idle pass threads give theirs back at once."""
        self.pool.scarce(scarce)

    def rested(self) -> None:
        """The worker rested: the pass threads check their connections before their next pass."""
        self.pool.rested()

    def close(self, timeout: float | None = None) -> None:
        self.pool.close(timeout)

    def _start(self, cursor: DueCursor, key: DueKey) -> None:
        """Hand *key*'s run to a thread, alone or as the head of a stretch, to claim there."""
        spec = cursor.options.jobs[key.job]
        # Idle threads share what is left rather than one of them driving it all in turn.
        free = self.pool.free()
        most = -(-(cursor.left() + 1) // free) if free else len(cursor.keys)
        stretch = cursor.stretch(key, spec, most, self._handed)
        handed = self._handed  # what the call, on its thread, takes its runs out of
        if len(stretch) > 1:
            self._submit(cursor, stretch, lambda: _stretch(cursor, stretch, spec, handed))
        else:  # the thread claims it (L2), or takes it over (L3)
            self._submit(cursor, [key], lambda: _alone(cursor, key, spec, handed))

    def _submit(self, cursor: DueCursor, keys: list[DueKey], call: Callable[[], list[Ran]]) -> None:
        cursor.in_flight += len(keys)
        self._handed.add(keys)
        self.dispatched = True
        self._tokens += 1
        self._flying[self._tokens] = (keys, cursor)
        self.pool.submit(self._tokens, call)

    def _collect(self, cursor: DueCursor, *, timeout: float) -> None:
        """Count the passes that ended in *cursor*: the drive in progress (W5)."""
        for done in self.pool.wait(timeout=timeout):
            keys, began_in = self._flying.pop(done.tag)
            began_in.in_flight -= len(keys)
            self._handed.discard(keys)
            if isinstance(done.error, Unstarted):
                continue  # never claimed: due again for any drive, uncharged (L2)
            if isinstance(done.error, Abandoned):
                # F13: past its timeout and its handler never returned: its lease
                # expires (R10, L10) and the run is taken over; the thread is replaced.
                cursor.report.warnings.append(Note(keys[0].id, _ABANDONED))
                continue
            if done.error is not None:  # a bug: nothing one run does stops the drive (R9)
                logger.error("Run id=%s could not be driven", keys[0].id, exc_info=done.error)
                cursor.report.errors.append(Note(keys[0].id, describe(done.error)))
                continue
            ran: list[Ran] = done.value
            if ran and ran[0].refused:
                # F10: nothing was claimed; fewer passes at once, not a drive aborted as
                # if the database were down. Idle threads give their connections back.
                self.pool.scarce()
                if all(note.text != _REFUSED_NOTE for note in cursor.report.warnings):
                    cursor.report.warnings.append(Note(keys[0].id, _REFUSED_NOTE))
                continue
            if not any(one.won for one in ran):
                cursor.lost(keys[0])  # another worker is on this stretch of the due order
            for key, one in zip(keys, ran, strict=True):
                if one.lost:
                    self.pool.scarce()  # F10: perhaps refused; idle threads give theirs back
                cursor.count(key, one)


def _alone(cursor: DueCursor, key: DueKey, spec: Job, handed: _Unclaimed) -> list[Ran]:
    """On a pool thread: claim *key*'s run (L2) or take it over (L3), and drive it."""
    handed.discard([key])  # from here on a claim, or the other worker's, keeps it from a drive
    if cursor.options.stop():  # it waited for a thread while the drive was told to stop (W5)
        return [SKIPPED]
    if not _connected(cursor.options.using):
        return [REFUSED]
    return _driven(_Handed([key], cursor.options.stop), cursor)


def _connected(using: str) -> bool:
    """Whether this thread has a connection, opening one if it has none; ``False`` if refused.

    Asked before the claim, so a refusal is known to have claimed nothing
    (F10): with the server at its connection limit the run stays due and the
    drive goes on with the threads that hold a connection, instead of
    reading the refusal as an outage and aborting the drive. Free while
    connected: Django opens nothing when it has a connection.
    """
    try:
        connections[using].ensure_connection()
    except DatabaseError:
        return False
    return True


class _Handed:
    """A pool thread's :class:`~.in_turn.Line`: the run, or the stretch of runs, it was handed.

    A run handed alone is claimed by its pass (L2) or taken over (L3). A
    stretch is claimed in one statement first (:meth:`claim_ahead`); then a
    run whose claim went elsewhere is not driven, and once the drive is told
    to stop, or a BEGIN found its queue paused, no further pass begins and
    the rest are given back, uncharged (W5, W6).
    """

    def __init__(self, keys: list[DueKey], stop: Callable[[], bool]) -> None:
        self.keys = keys
        self.position = 0
        self.claims = Claims()
        self._stop = stop
        #: The runs whose claims this thread won; ``None`` for a run handed alone.
        self._won: set[str] | None = None
        self._paused: set[str] = set()

    def claim_ahead(self, spec: Job) -> None:
        self.claims.claim([key.id for key in self.keys], spec)
        self._won = self.claims.ids()

    def next(self) -> DueKey | None:
        return self.follow() if self.position < len(self.keys) else None

    def follow(self) -> DueKey:
        key = self.keys[self.position]
        self.position += 1
        return key

    def claim(self, key: DueKey, spec: Job) -> Claimed | Ran | None:
        if self._won is None:
            return None
        if key.id not in self._won:
            return NOT_WON
        if self._stop() or key.queue in self._paused:
            return SKIPPED  # no new pass once stopping, nor in a queue found paused
        claimed = self.claims.pop(key.id)
        return SKIPPED if claimed is None else claimed  # by the keeper, or its lease ran out

    def follower(self) -> Follower | None:
        after = self.keys[self.position].id if self.position < len(self.keys) else ""
        if after not in self.claims:
            return None
        return Follower(self.claims, after, lambda: not self._stop())

    def noted(self, key: DueKey, ran: Ran) -> None:
        if ran.outcomes and ran.outcomes[-1].paused:
            self._paused.add(key.queue)


def _driven(line: _Handed, cursor: DueCursor) -> list[Ran]:
    """What each of *line*'s runs came to, in order: those not reached after a lost
    connection were skipped, uncharged (D4)."""
    ran = [one for _key, one in drive_in_turn(line, cursor.options)]
    return ran + [SKIPPED] * (len(line.keys) - len(ran))


def _stretch(cursor: DueCursor, keys: list[DueKey], spec: Job, handed: _Unclaimed) -> list[Ran]:
    """On a pool thread: claim *keys*' runs in one statement, then drive them in turn (§13).

    As the drive's own thread drives its claims made ahead: each finish
    carries the next run's BEGIN (:mod:`.follower`), a claim whose turn
    comes too late to begin is given back, and the keeper gives back those
    behind a pass that runs long (:class:`_Handed`).
    """
    using = cursor.options.using
    if not _connected(using):
        handed.discard(keys)
        return [REFUSED] * len(keys)
    line = _Handed(keys, cursor.options.stop)
    try:
        line.claim_ahead(spec)
    except DatabaseError as exc:
        handed.discard(keys)
        return [Ran([], error=exc, lost=connection_lost(using)), *[NOT_WON] * (len(keys) - 1)]
    # Claimed now, or another worker's: a drive's snapshot no longer reads them as due,
    # and one given back from here on is due for any drive to hand over again.
    handed.discard(keys)
    try:
        return _driven(line, cursor)
    finally:
        line.claims.give_back()  # whatever was not reached: due again at once, uncharged (L2)
