"""The lease arithmetic, in one place (SPEC L4, L5, L7).

Lease *times* are the database's (L1): every expiry is computed in SQL. What
lives here is the other half: the shares of a lease at which a worker acts,
and the worker's own monotonic count of how much of its lease is left since
it sent the claim or renewal that set it.
"""

from __future__ import annotations

import time
from datetime import timedelta

from .policy import Retry

__all__ = [
    "ADMISSION",
    "ENTRY_MARGIN",
    "RENEW_AT_CHECK",
    "RENEW_BEFORE_STEP",
    "TAKEOVER_NOTE",
    "Countdown",
]

#: L4: the share of its lease a claim must still have to begin its pass. It is
#: also the bound on the at-least-once window: a double run needs the reply to
#: BEGIN to take longer than this share of the lease.
ENTRY_MARGIN = 0.25
#: L7: ``p.check()`` renews a lease with less than this share left.
RENEW_AT_CHECK = 0.5
#: L7: a step renews first when less than this share is left, so it never
#: starts work on a lease that may already be gone.
RENEW_BEFORE_STEP = 0.25

#: L5: admission misses back off 1 s doubling, capped at 5 min, and the tenth
#: in a row fails the run. No jitter: the wait is the lease's, not a load's.
ADMISSION = Retry(max_attempts=10, base=timedelta(seconds=1), cap=timedelta(minutes=5), jitter=0)

#: ``last_error`` of a run whose begun lease expired and was taken over (L3).
TAKEOVER_NOTE = (
    "the pass holding this run began and stopped reporting (worker killed or cut off); "
    "its lease expired and the run was taken over"
)


class Countdown:
    """How much of a lease is left by this worker's own monotonic clock (L1, L4).

    It starts counting just *before* the statement that set the lease was
    sent, so the round trip counts against the worker, never for it.
    """

    __slots__ = ("_from", "lease", "strict")

    def __init__(self, lease: timedelta, sent: float) -> None:
        self.lease = lease
        self._from = sent
        #: Renew only an unexpired lease: the pass holds a concurrency slot (C2).
        self.strict = False

    @staticmethod
    def now() -> float:
        """The moment to pass to :meth:`renewed`: read before the renewal is sent."""
        return time.monotonic()

    def left(self) -> timedelta:
        return self.lease - timedelta(seconds=time.monotonic() - self._from)

    def renewed(self, sent: float) -> None:
        self._from = sent

    def below(self, share: float) -> bool:
        """Whether less than *share* of the lease is left."""
        return self.left() < self.lease * share

    @property
    def margin(self) -> timedelta:
        """L4: what must still be left, by the database's clock too, to begin."""
        return self.lease * ENTRY_MARGIN

    def can_begin(self) -> bool:
        return self.left() > self.margin
