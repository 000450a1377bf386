"""O1: this process's pass statistics, counted in memory and flushed as increments (SPEC §16).

Each pass the drive tallies is counted here, per (minute, job, queue,
outcome): how many, their total and longest duration, and a fixed-bucket
histogram of durations (:data:`~.models.observability.BUCKETS`). Nothing is
written per pass: the figures go to the database at most every
``LEASEJOBS["STATS_EVERY"]`` and when the worker exits, each flush one read
of the database's clock and ONE statement per chunk of rows that *adds* to
the rows already there (:func:`.store.stats.add_stats`), so many processes
flushing at once never lose a count. A flush that fails is logged and its
figures kept for the next; it never fails a pass or a drive.

A pass is counted in the minute of the database's clock (revision 4), the
clock every window is read on: a worker whose wall clock is 20 minutes
behind still shows in the last 15 minutes. Each pass is noted at the
second of this process's monotonic clock it ended in, and each flush reads
the database's time once and places every second it carries on that clock
(:func:`database_offset`). Monotonic, not the wall clock: a wall clock
stepped between a pass and its flush (F6) moves no pass.

One :data:`aggregate` per process, shared by the drive's thread and, with
``--concurrency``, nothing else: passes are tallied where the drive counts
them, whichever thread ran them (W5).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from django.db import router

from .clock import get_clock
from .conf import conf
from .contained import contained
from .errors import describe
from .models.observability import PassStat, Tally
from .store.stats import Row, add_stats

__all__ = [
    "Aggregate",
    "StatKey",
    "Tally",
    "aggregate",
    "database_offset",
    "lost_observers",
    "observers",
]

logger = logging.getLogger("django_leasejobs")

#: (the second the pass ended in, on this process's ``time.monotonic()``, job, queue,
#: outcome): placed on the database's clock when flushed.
StatKey = tuple[int, str, str, str]

#: Called for every pass counted, with (job, queue, outcome, seconds): the live
#: metrics of ``rundueJobs --metrics-port`` (O2) add themselves here. Both lists are
#: written only as that server starts and stops; the pass threads only iterate them.
observers: list[Callable[[str, str, str, float], None]] = []
#: Called, with no arguments, each time a drive finds a claim went to another
#: worker process (``DueCursor.lost()``): the ``leasejobs_claims_lost_total`` counter (O2).
lost_observers: list[Callable[[], None]] = []


class Aggregate:
    """One process's counts since its last flush, and when that was.

    Counts wait per second until a flush merges them into minutes: one
    tally per second that saw a pass of a (job, queue, outcome) -- about ten
    each with the default ``STATS_EVERY``, more while flushes fail.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[StatKey, Tally] = {}
        self._flushed = time.monotonic()

    def observe(self, job: str, queue: str, outcome: str, seconds: float) -> None:
        """Count one pass that ended now, with its duration; no statement (§13).

        Noted at this second of the monotonic clock; the flush places it on
        the database's. The live observers (``--metrics-port``) hear of it
        whatever ``STATS`` says.

        Never raises (F12): an observer that fails, or a count that cannot be
        kept, is logged once per kind and process, and the pass was counted
        everywhere else.
        """
        for observer in observers:
            with contained("Pass metrics"):
                observer(job, queue, str(outcome), seconds)
        with contained("Pass statistics"):
            self._count(job, queue, str(outcome), seconds)

    def _count(self, job: str, queue: str, outcome: str, seconds: float) -> None:
        if not conf.STATS:
            return
        key = (math.floor(time.monotonic()), job, queue, outcome)
        with self._lock:
            tally = self._pending.get(key)
            if tally is None:
                tally = self._pending[key] = Tally()
            tally.add(max(0.0, seconds))

    def due_in(self) -> float | None:
        """Seconds until a flush is due; ``None`` while nothing waits to be written."""
        if not self._pending:
            return None
        every = conf.STATS_EVERY.total_seconds()
        return max(0.0, self._flushed + every - time.monotonic())

    def flush(self, *, force: bool = False) -> int:
        """Write what was counted, if a flush is due (or *force*); return the rows written.

        One read of the database's clock, then :func:`add_stats`: the same
        statements however many passes and seconds it carries. Never raises:
        a flush the database refuses is logged, and its counts are kept, each
        at its second, to be placed and added by the next one.
        """
        try:
            if not force and (self.due_in() or 0.0) > 0:
                return 0
        except Exception as exc:  # F12: a setting that cannot be read is no drive's failure
            logger.warning("Pass statistics not written (%s)", describe(exc))
            return 0
        with self._lock:
            taken, self._pending = self._pending, {}
            self._flushed = time.monotonic()
        if not taken:
            return 0
        try:
            using = router.db_for_write(PassStat)
            rows = _placed(taken, database_offset(using))
            add_stats(rows)
        except Exception as exc:  # a database error or any other: never a drive's failure
            logger.warning("Pass statistics not written (%s); kept for the next", describe(exc))
            with self._lock:
                for key, tally in taken.items():
                    kept = self._pending.setdefault(key, Tally())
                    kept.merge(tally)
            return 0
        return len(rows)

    def forget(self) -> None:
        """Drop what was counted (tests)."""
        with self._lock:
            self._pending.clear()
            self._flushed = time.monotonic()


def database_offset(using: str) -> float:
    """Seconds from this process's ``time.monotonic()`` to the database's clock, read now.

    One read of the clock the windows are read on (:func:`~.clock.get_clock`:
    the database's, or a test's), taken as of the middle of its round trip.
    """
    before = time.monotonic()
    now = get_clock().now(using)
    after = time.monotonic()
    return now.timestamp() - (before + after) / 2


def _placed(taken: dict[StatKey, Tally], offset: float) -> list[Row]:
    """*taken*'s tallies per (minute of the database's clock, job, queue, outcome), in key order.

    A second at *offset* from the database's clock lands in the minute it
    starts in: a pass is placed at most a second early, never late, so every
    window read after it ended holds it (placed at its second's middle, a pass
    in a minute's last half-second fell in a minute no reader had reached yet).
    Key order: two flushes lock the rows they add to in one order.
    """
    minutes: dict[tuple[int, str, str, str], Tally] = {}
    for (second, job, queue, outcome), tally in taken.items():
        minute = math.floor((second + offset) / 60) * 60
        minutes.setdefault((minute, job, queue, outcome), Tally()).merge(tally)
    return [
        (
            datetime.fromtimestamp(minute, tz=UTC),
            job,
            queue,
            outcome,
            minutes[minute, job, queue, outcome],
        )
        for minute, job, queue, outcome in sorted(minutes)
    ]


#: This process's statistics, shared by its drives (O1).
aggregate = Aggregate()
