"""A pass's lease, in one place (SPEC L2-L8): what it is, and its arithmetic.

Lease *times* are the database's (L1): every expiry is computed in SQL. What
lives here is the other half: the shares of a lease at which a worker acts,
the worker's own monotonic count of how much of its lease is left since it
sent the claim or renewal that set it, and the one value a pass is known by
from its claim to its outcome -- :class:`Lease` -- which every part of the
pass is handed whole.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from .policy import Retry

if TYPE_CHECKING:
    from .definition import Definition
    from .exceptions import UnreadableRow
    from .models import Run
    from .verdicts import PassRecord

__all__ = [
    "ADMISSION",
    "ENTRY_MARGIN",
    "RENEW_AT_CHECK",
    "RENEW_BEFORE_STEP",
    "TAKEOVER_NOTE",
    "Claimed",
    "Countdown",
    "Lease",
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

    __slots__ = ("_from", "_lock", "lease")

    def __init__(self, lease: timedelta, sent: float) -> None:
        self.lease = lease  # read-only after this
        self._from = sent
        # A heartbeat's thread renews the lease beside the pass's own (L10): see renewed().
        self._lock = threading.Lock()

    @staticmethod
    def now() -> float:
        """The moment to pass to :meth:`renewed`: read before the renewal is sent."""
        return time.monotonic()

    def left(self) -> timedelta:
        return self.lease - timedelta(seconds=time.monotonic() - self._from)

    def renewed(self, sent: float) -> None:
        """A renewal sent at *sent* wrote: count from then, unless a later-sent one did already.

        Of two renewals that both wrote -- a heartbeat's and a step's, on two
        threads -- the one the database ran last set the expiry, and it ran
        after both were sent; so counting from the later *sent* never counts
        for the worker, whichever thread gets here last.
        """
        with self._lock:
            self._from = max(self._from, sent)

    def below(self, share: float) -> bool:
        """Whether less than *share* of the lease is left."""
        return self.left() < self.lease * share

    @property
    def margin(self) -> timedelta:
        """L4: what must still be left, by the database's clock too, to begin."""
        return self.lease * ENTRY_MARGIN

    def can_begin(self) -> bool:
        return self.left() > self.margin


class Claimed(NamedTuple):
    """A claim won (L2), before the pass is admitted: what the claim read back.

    ``found`` is the run as claimed, or the :class:`UnreadableRow` it could
    not be read back as (R9, §12); ``countdown`` has counted since just before
    the claim was sent. Made by the drive's own claim, or by a claim made
    ahead of the run's turn (:mod:`.claims_ahead`), on the drive's thread or a
    pool thread's (W5).
    """

    found: Run | UnreadableRow
    owner: str
    countdown: Countdown
    #: ``None`` until its BEGIN is sent. ``True`` or ``False``: the BEGIN rode in the
    #: commit of the pass before it (:class:`~.follower.Follower`, §13), and wrote or not.
    begun: bool | None = None


@dataclass(frozen=True, slots=True)
class Lease:
    """One pass's hold on one run: its identity from the claim to the outcome (L2-L8).

    Built once, when the pass is admitted, and handed whole to everything
    that acts for the pass -- the handler's :class:`~.passes.Pass`, its step
    :class:`~.ledger.Ledger`, its :class:`~.heartbeat.Heartbeat`, and the
    store verb that concludes it -- so none of them is given the parts one
    by one, and nothing of a pass lives anywhere but in its own lease: passes
    on several threads share nothing (W5).

    Frozen, because nothing a pass does changes whose lease it is: ``run`` is
    the row as claimed, ``spec`` the job as it applies to that row (a task's
    own options, §9), ``owner`` the token that fences every write (L6),
    ``strict`` whether its renewals may only extend an unexpired lease (set
    at BEGIN, :func:`~.admission.admit`). The parts that move have their own
    methods: the ``countdown`` is renewed (L7), and the ``record`` is told
    what decided the pass (its verdict).
    """

    run: Run
    spec: Definition
    owner: str
    countdown: Countdown
    record: PassRecord
    #: Renew only an unexpired lease: the pass holds a concurrency slot (C2).
    strict: bool = False

    @property
    def run_id(self) -> str:
        return str(self.run.pk)

    def evolve(self, **changes: Any) -> Lease:
        """A copy with *changes*: the lease as BEGIN made it (``strict``), or a test's."""
        return replace(self, **changes)
