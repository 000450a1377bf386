"""The pool side of a drive (SPEC W5): the snapshot's runs claimed here, their passes on threads.

A :class:`Dispatcher` walks a drive's snapshot (:class:`~.dispatch.Walk`) in
its order and claims each run, as a drive always has, but hands the run's
passes to a :class:`~.pool.Pool` of threads -- each with a database
connection of its own, each pass under its own owner token -- and goes on
while they run: up to N passes at once, every rule of a pass unchanged. A
slow pass holds one thread, never the runs behind it while another is free.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, NamedTuple

from django.db import DatabaseError

from .admission import claim
from .dispatch import DueKey, Walk, drive
from .errors import connection_lost, describe
from .leases import Claimed
from .outcome import Outcome
from .pacing import pace
from .pool import Pool
from .report import Note
from .store.ahead import let_go

if TYPE_CHECKING:
    from .registry import Job

__all__ = ["WAIT_SLICE", "Dispatcher"]

logger = logging.getLogger("django_leasejobs")

#: How long the dispatcher waits for a pass to end before it looks at the clock again.
WAIT_SLICE = 0.5


class _Ran(NamedTuple):
    """What a pool thread hands back for one run."""

    outcomes: list[Outcome]
    seconds: float
    #: A database error driving the run, and whether that thread's connection is gone.
    error: DatabaseError | None = None
    lost: bool = False
    #: The claim made ahead could no longer begin when a thread took it: given back (L2).
    given_back: bool = False


class Dispatcher:
    """Drives the snapshot's runs on a pool of *concurrency* threads (W5).

    Made for one call of ``run_due_jobs(concurrency=N)``, or kept by a
    ``--loop`` worker (and by ``--max-seconds``) across its drives, so that
    the pool's threads and their connections are kept too (§13). A pass may
    still run when its drive ends: the worker's next drive goes on beside
    it, and its outcome is counted in the report of the drive it ended in.
    :meth:`finish` waits for every pass in flight.
    """

    def __init__(self, concurrency: int) -> None:
        # A backlog of one call per thread: a thread that frees starts the next run
        # claimed ahead at once, not after the dispatcher's own round trip (§13).
        self.pool = Pool(concurrency, backlog=concurrency)
        #: Whether the last drive handed any pass to a thread: it did work (W1, W3).
        self.dispatched = False
        #: The passes in flight: their run, and the drive they were started in.
        self._flying: dict[int, tuple[DueKey, Walk]] = {}
        self._tokens = 0

    def drive(self, state: Walk, *, wait: bool) -> None:
        """Hand the snapshot's runs to the pool; with *wait*, until every pass has ended."""
        self.dispatched = False
        self._collect(state, timeout=0)
        while not state.stop():
            # Every thread busy: the next run goes to the backlog only if its job's passes
            # are short (§13: it waits a share of one); else it waits for a thread.
            if not self.pool.room() or (not self.pool.free() and not self._short(state)):
                # Claims held for the next runs wait for a thread: given back if that takes
                # long, as behind a long pass at concurrency 1 (pacing.Keeper, §13).
                with state.claims.watch():
                    self._collect(state, timeout=WAIT_SLICE)
                continue
            key = state.next()
            if key is None:
                break
            self._start(state, key)
            self._collect(state, timeout=0)
        if wait:
            self.finish(state)
        state.finish()

    def _short(self, state: Walk) -> bool:
        """Whether the next run's job has passes short enough to queue behind the threads."""
        key = state.peek()
        return key is not None and pace.batch(state.by_name[key.job], self.pool.size) > 1

    def finish(self, state: Walk) -> None:
        """Wait for every pass in flight, counting each in *state*'s report."""
        while self.pool.busy:
            self._collect(state, timeout=WAIT_SLICE)

    def rested(self) -> None:
        """The worker rested: the pass threads check their connections before their next pass."""
        self.pool.rested()

    def close(self) -> None:
        self.pool.close()

    def _start(self, state: Walk, key: DueKey) -> None:
        """Claim *key*'s run here (L2), and hand its passes to a free thread."""
        spec = state.by_name[key.job]
        try:
            # Short passes: claim for the free threads and one more round of them, so a
            # thread that frees finds its next run claimed already (§13: sized to the pool).
            room = self.pool.free() + self.pool.size
            claimed, lost = state.take(key, spec, room=room, threads=self.pool.size)
            if claimed is None and not lost:
                claimed = claim(key.id, spec, took_over=key.took_over)
                lost = claimed is None
        except DatabaseError as exc:
            state.failed(key, exc, connection_lost(state.using))
            return
        if lost:
            if not state.claims:  # the batch won nothing: another worker is on this stretch
                state.lost()
            return
        state.in_flight += 1
        self.dispatched = True
        self._tokens += 1
        self._flying[self._tokens] = (key, state)
        self.pool.submit(self._tokens, lambda: _timed(state, key, spec, claimed))

    def _collect(self, state: Walk, *, timeout: float) -> None:
        """Count the passes that ended in *state*: the drive in progress (W5)."""
        for done in self.pool.wait(timeout=timeout):
            key, began_in = self._flying.pop(done.tag)
            began_in.in_flight -= 1
            if done.error is not None:  # a bug: nothing one run does stops the drive (R9)
                logger.error("Run id=%s could not be driven", key.id, exc_info=done.error)
                state.report.errors.append(Note(key.id, describe(done.error)))
                continue
            ran: _Ran = done.value
            if ran.given_back:
                continue  # claimed ahead, its turn came too late to begin: uncharged
            if ran.error is not None:
                state.failed(key, ran.error, ran.lost)
                continue
            if not ran.outcomes:
                state.lost()
            state.tally(key, ran.outcomes, ran.seconds)


def _timed(state: Walk, key: DueKey, spec: Job, claimed: Claimed | None) -> _Ran:
    """On a pool thread: drive the run, and say how long it took (for :mod:`.pacing`)."""
    if claimed is not None and not claimed.countdown.can_begin():
        # It waited in the backlog past L4's margin: given back uncharged, never a miss (L5).
        let_go(key.id, claimed.owner)
        return _Ran([], 0.0, given_back=True)
    started = time.monotonic()
    try:
        outcomes = drive(state, key, spec, claimed)
    except DatabaseError as exc:
        # Asked here: the error was on this thread's connection (D4).
        return _Ran([], 0.0, exc, connection_lost(state.using))
    return _Ran(outcomes, time.monotonic() - started)
