"""The keys one drive found at their limit, and the due runs of theirs it held back (C4).

Pure bookkeeping for the drive (:mod:`.cursor`); the one write is the store's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import DatabaseError

from . import store
from .errors import describe
from .outcome import Throttled
from .report import DriveReport, Note

if TYPE_CHECKING:
    from .due import DueKey

__all__ = ["FullKeys"]


class FullKeys:
    """The keys one drive found at their limit (§14), and the due runs of theirs it stepped over.

    Once a pass of a key was throttled, the key's other runs in the snapshot
    would be too: claiming each only to let it go costs three statements a
    run. The drive steps over them instead and, at its end, holds them back
    in one statement a key (:mod:`.store.held_back`): until about when a slot
    frees, or each until the begin its rate will give it -- so they neither
    fill the next snapshot nor keep the runs behind them waiting (C4).
    """

    def __init__(self) -> None:
        self._reached: dict[tuple[str, str], Throttled] = {}
        self._held: dict[tuple[str, str], list[str]] = {}

    def reached(self, job: str, throttled: Throttled) -> None:
        self._reached[(job, throttled.key)] = throttled

    def throttles(self, key: DueKey) -> bool:
        """Whether *key*'s run belongs to a key at its limit (and is now held back)."""
        found = (key.job, key.limit_key)
        if found not in self._reached or key.took_over:
            return False  # a takeover is claimed: its charge is due whatever the limit
        self._held.setdefault(found, []).append(key.id)
        return True

    def throttle_rest(self, report: DriveReport) -> int:
        """Move the runs stepped over; return how many moved. Never fails the drive."""
        moved = 0
        for found, ids in self._held.items():
            throttled = self._reached[found]
            job, key = found
            try:
                if throttled.every is not None and throttled.until is not None:
                    moved += store.space_unclaimed(ids, job, key, throttled.until, throttled.every)
                else:
                    moved += store.throttle_unclaimed(
                        ids, throttled.which, throttled.until, throttled.wait
                    )
            except DatabaseError as exc:
                report.errors.append(Note("", f"limited runs not held back: {describe(exc)}"))
        return moved
