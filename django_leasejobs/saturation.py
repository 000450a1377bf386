"""A limit that stays reached, reported once in a while -- never each throttled pass (C5).

Throttling is how a limit works, so a throttled pass logs nothing. A key whose
limit has refused every pass for :data:`SATURATED_AFTER` logs one WARNING, and
again at most every :data:`SATURATED_AFTER` while it stays so; the first pass
of the key that begins ends the episode. Per process: each worker speaks for
what it saw.
"""

from __future__ import annotations

import logging
import threading
import time

from .states import Throttle
from .times import duration

__all__ = ["SATURATED_AFTER", "began", "refused"]

logger = logging.getLogger("django_leasejobs")

#: How long a key's limit must refuse every pass before a warning (seconds).
SATURATED_AFTER = 300.0

_lock = threading.Lock()
#: (job, key) -> (first refusal of the episode, last warning), monotonic seconds. Written
#: by every pass thread, under :data:`_lock` (began()'s emptiness test outside it is a hint).
_episodes: dict[tuple[str, str], tuple[float, float | None]] = {}


def refused(job: str, key: str, which: Throttle) -> None:
    """A pass of (*job*, *key*) was throttled by its *which* limit."""
    at = time.monotonic()
    with _lock:
        since, warned = _episodes.setdefault((job, key), (at, None))
        if at - since < SATURATED_AFTER or (warned is not None and at - warned < SATURATED_AFTER):
            return
        _episodes[(job, key)] = (since, at)
    logger.warning(
        "Limit saturated job=%s key=%s limit=%s: every pass throttled for %s",
        job,
        key or "-",
        which,
        duration(at - since),
    )


def began(job: str, key: str) -> None:
    """A pass of (*job*, *key*) began: its limit is not saturated (any more)."""
    if _episodes:
        with _lock:
            _episodes.pop((job, key), None)
