"""Claims ahead of a run's turn, and how many: only while a job's passes are short (§13).

A claim made ahead (:mod:`.store.ahead`) spares a statement per pass, but it
keeps the run from every other worker until its turn comes. So a drive
claims ahead only for a job whose recent passes in this process were short
-- no run should wait more than :data:`AHEAD_WAIT` for its turn, nor more
than a tenth of its lease -- and at most :data:`BATCH_MAX` at a time. A job
seen for the first time, or whose passes are slow, is claimed one run at a
time, exactly as before. What a drive claimed ahead and did not reach
(stopped, or out of runs) it gives back, due again at once and uncharged.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import timedelta
from typing import TYPE_CHECKING

from django.db import DatabaseError

from .errors import describe
from .execute import Claimed
from .holder import current_holder
from .leases import Countdown
from .store.ahead import give_back, owner_of, take_ahead

if TYPE_CHECKING:
    from .registry import Job

__all__ = ["AHEAD_WAIT", "BATCH_MAX", "Claims", "Pace", "pace"]

logger = logging.getLogger("django_leasejobs")

#: The most runs one statement claims ahead.
BATCH_MAX = 10
#: About the longest a run claimed ahead waits for its turn.
AHEAD_WAIT = timedelta(milliseconds=50)
#: Weight of the newest pass in a job's running average.
_WEIGHT = 0.2


class Pace:
    """Each job's recent seconds per run driven, in this process (a moving average)."""

    def __init__(self) -> None:
        self._seconds: dict[str, float] = {}

    def seconds(self, job: str) -> float | None:
        """*job*'s recent seconds per run, or ``None`` before its first in this process."""
        return self._seconds.get(job)

    def observe(self, job: str, seconds: float) -> None:
        last = self._seconds.get(job)
        self._seconds[job] = seconds if last is None else last + _WEIGHT * (seconds - last)

    def batch(self, spec: Job) -> int:
        """How many of *spec*'s runs to claim at once: 1 until its passes are known short.

        Always 1 for a limited job (§14): runs claimed ahead would wait for a
        slot or a rate token the claim cannot know it will get.
        """
        seconds = self._seconds.get(spec.name)
        if seconds is None or spec.limit is not None:
            return 1
        wait = min(AHEAD_WAIT, spec.effective_lease / 10).total_seconds()
        return max(1, min(BATCH_MAX, int(wait / max(seconds, 1e-6))))

    def forget(self) -> None:
        self._seconds.clear()


#: This process's pace, shared by its drives.
pace = Pace()


class Claims:
    """The runs one drive claimed ahead and has not reached yet."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[str, Claimed]] = {}

    def __bool__(self) -> bool:
        return bool(self._held)

    def claim(self, run_ids: list[str], spec: Job) -> None:
        lease = spec.effective_lease
        sent = Countdown.now()  # the round trip counts against the claims (L1)
        prefix, won = take_ahead(run_ids, lease, current_holder())
        for run_id, found in won.items():
            claimed = Claimed(found, owner_of(prefix, run_id), Countdown(lease, sent))
            self._held[run_id] = (prefix, claimed)

    def turn(self, run_id: str, batch: list[str], spec: Job) -> tuple[Claimed | None, bool]:
        """The claim made ahead for *run_id* (``None``: claim it alone), and whether it was lost.

        When none is held and *batch* (``run_id`` and the runs after it) has
        more than one run, claims them all ahead first; *lost* then says the
        claim of ``run_id`` went to another worker.
        """
        claimed = self.pop(run_id)
        if claimed is not None or len(batch) < 2:
            return claimed, False
        self.claim(batch, spec)
        claimed = self.pop(run_id)
        return claimed, claimed is None

    def pop(self, run_id: str) -> Claimed | None:
        """The claim made ahead for *run_id*, if it can still begin; else ``None``.

        A claim whose share of the lease ran out while earlier passes ran is
        given back first (uncharged), so that the run is claimed afresh,
        never counted as an admission miss (L5) it did not make.
        """
        held = self._held.pop(run_id, None)
        if held is None:
            return None
        prefix, claimed = held
        if claimed.countdown.can_begin():
            return claimed
        give_back(prefix, [run_id])
        return None

    def give_back(self) -> None:
        """Release every claim not reached; never fails the drive."""
        by_prefix: dict[str, list[str]] = defaultdict(list)
        for run_id, (prefix, _claimed) in self._held.items():
            by_prefix[prefix].append(run_id)
        self._held.clear()
        try:
            for prefix, run_ids in by_prefix.items():
                give_back(prefix, run_ids)
        except DatabaseError as exc:
            # Their leases simply expire; never begun, they cost nothing then either.
            logger.warning("Claims made ahead could not be given back: %s", describe(exc))
