"""How many runs to claim ahead of their turn: only while a job's passes are short (§13).

A claim made ahead (:mod:`.claims_ahead`) spares a statement per pass, but
it keeps the run from every other worker until its turn comes. So a drive
claims ahead only for a job whose recent passes in this process were short
-- no run should wait more than :data:`AHEAD_WAIT` for its turn, nor more
than a tenth of its lease -- and at most :data:`BATCH_MAX` at a time. A job
seen for the first time, or whose passes are slow, is claimed one run at a
time. :class:`Pace` keeps each job's recent seconds per run.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .registry import Job

__all__ = ["AHEAD_WAIT", "BATCH_MAX", "STRETCH_MAX", "Pace", "pace"]

#: The most runs one statement claims ahead.
BATCH_MAX = 10
#: The most runs of a stretch: what one pool thread claims at once and drives in turn (W5).
#: Larger than :data:`BATCH_MAX`: each stretch also costs the dispatcher's hand-off, and
#: at ``--concurrency 4`` 25 a stretch drained no-op runs 20-40 % faster than 10 (§13).
STRETCH_MAX = 25
#: About the longest a run claimed ahead waits for its turn.
AHEAD_WAIT = timedelta(milliseconds=50)
#: Weight of the newest pass in a job's running average.
_WEIGHT = 0.2


class Pace:
    """Each job's recent seconds per run driven, in this process (a moving average)."""

    def __init__(self) -> None:
        # Every drive of the process observes: each update (a read, then a write) is
        # made under the lock; a read is one dict lookup and needs none.
        self._lock = threading.Lock()
        self._seconds: dict[str, float] = {}

    def seconds(self, job: str) -> float | None:
        """*job*'s recent seconds per run, or ``None`` before its first in this process."""
        return self._seconds.get(job)

    def observe(self, job: str, seconds: float) -> None:
        with self._lock:
            last = self._seconds.get(job)
            self._seconds[job] = seconds if last is None else last + _WEIGHT * (seconds - last)

    def batch(self, spec: Job, most: int = BATCH_MAX) -> int:
        """How many of *spec*'s runs to claim at once, up to *most*: 1 until its passes are
        known short.

        As many as wait their turn, one pass after another on one thread,
        within :data:`AHEAD_WAIT` (and a tenth of the lease).

        Always 1 for a limited job (§14): runs claimed ahead would wait for a
        slot or a rate token the claim cannot know it will get.
        """
        seconds = self._seconds.get(spec.name)
        if seconds is None or spec.limit is not None:
            return 1
        wait = min(AHEAD_WAIT, spec.effective_lease / 10).total_seconds()
        return max(1, min(most, int(wait / max(seconds, 1e-6))))

    def forget(self) -> None:
        with self._lock:
            self._seconds.clear()


#: This process's pace, shared by its drives.
pace = Pace()
