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
from collections.abc import Callable

from .cursor import DueCursor
from .due import DriveOptions, DueKey
from .errors import describe
from .handed import Unclaimed, run_handed
from .in_turn import Ran
from .pool import Abandoned, Pool, Unstarted
from .pooled import put_back
from .report import Note

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
        self._handed = Unclaimed()
        self._tokens = 0

    def hand_out(self, cursor: DueCursor, options: DriveOptions, *, wait: bool) -> None:
        """Hand the snapshot's runs to the pool; with *wait*, until every pass has ended.

        *cursor* is where the drive is in its snapshot; *options*, what each
        pass is handed unchanged, so they travel apart (:mod:`.cursor`).
        """
        self.dispatched = False
        self._collect(cursor, timeout=0)
        while not options.stop():
            # Every thread busy and the backlog full. A call waiting in the backlog holds
            # no claim -- its thread claims when it takes it -- so a thread that frees
            # starts its next pass at once, and no lease waits out a slow pass.
            if not self.pool.room():
                self._collect(cursor, timeout=WAIT_SLICE)
                continue
            # Runs handed to a thread by an earlier drive and waiting for it, unclaimed, so
            # still due in this drive's snapshot, are not handed over twice.
            keys = cursor.hand_out(self.pool.free(), self._handed)
            if keys is None:
                break
            self._submit(options, keys, cursor)
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

    def _submit(self, options: DriveOptions, keys: list[DueKey], cursor: DueCursor) -> None:
        """Hand *keys*' runs to a thread, which claims them there (:func:`~.handed.run_handed`)."""
        spec = options.jobs[keys[0].job]
        handed = self._handed  # what the call, on its thread, takes its runs out of
        handed.add(keys)
        cursor.in_flight += len(keys)
        self.dispatched = True
        self._tokens += 1
        self._flying[self._tokens] = (keys, cursor)
        self.pool.submit(self._tokens, lambda: run_handed(options, keys, spec, handed))

    def _collect(self, cursor: DueCursor, *, timeout: float) -> None:
        """Count the passes that ended in *cursor*: the drive in progress (W5)."""
        if timeout:
            put_back()  # on Django's pool, this thread holds none while it waits (§13)
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
            if cursor.counted(keys, ran):
                self.pool.scarce()  # F10: perhaps refused; idle threads give theirs back
