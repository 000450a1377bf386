"""What one pass came to, as the drive counts it (SPEC §3 ``DriveReport``, C4).

Pure data: made by :mod:`.admission` and :mod:`.conclusion`, read by the
drive, whichever thread ran the pass (W5).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from .states import PassOutcome, Throttle

__all__ = ["PAUSED", "SUPERSEDED", "Outcome", "Throttled"]


class Throttled(NamedTuple):
    """What a throttled pass hands the drive, so it holds back the key's other runs (C4)."""

    key: str
    which: Throttle
    until: datetime | None
    wait: timedelta
    #: A rate's interval: the key's runs held back are spaced this far apart (C3).
    every: timedelta | None = None


@dataclass(frozen=True)
class Outcome:
    """What one pass (or one attempt to begin one) came to."""

    status: PassOutcome
    error: str = ""
    warning: str = ""
    #: A throttled pass: which limit refused it, and when the run is due again.
    throttle: Throttled | None = None
    #: How long the pass took, from its admission to its outcome, its run's queue, and
    #: the name its run is known by (:func:`~.known.known_as`: a task run's task path) (O1).
    seconds: float = 0.0
    queue: str = ""
    job: str = ""
    #: No pass: its queue was paused after the drive read it, so BEGIN refused it and the
    #: claim was let go, uncharged (W6). Not counted; the drive steps over the queue.
    paused: bool = False


SUPERSEDED = Outcome(PassOutcome.SUPERSEDED)
#: A claim let go because its queue was paused meanwhile (W6).
PAUSED = Outcome(PassOutcome.SUPERSEDED, paused=True)
