"""What a pass meets: raised by a handler, met by it, or naming how its attempt ended.

:class:`Defer` a handler raises; the step and timeout errors it meets and
may catch; :class:`PassAbandoned` and :class:`RunCancelled` are never
raised, but name an attempt's end in a Django task's result (§9). Two stand
outside the hierarchy on purpose: :class:`LeaseLost` and
:class:`PassInterrupted` are ``BaseException`` s, like
``asyncio.CancelledError``, so a handler's ``except Exception`` cannot
swallow them.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django_leasejobs.policy import MAX_DELAY, Retry

from .base import LeaseJobsError

__all__ = [
    "DecodeFailed",
    "Defer",
    "LeaseLost",
    "PassAbandoned",
    "PassInterrupted",
    "PassTimedOut",
    "RunCancelled",
    "StepFailed",
    "StepInTransaction",
    "StepReused",
    "UnreadableRow",
]


class Defer(LeaseJobsError):
    """The upstream said "not now": no attempt is charged (SPEC R8)."""

    def __init__(self, delay: timedelta, reason: str = "") -> None:
        if not isinstance(delay, timedelta) or delay < timedelta(0):
            raise TypeError("Defer(delay) takes a non-negative datetime.timedelta")
        if delay > MAX_DELAY:
            raise ValueError(
                f"Defer(delay) takes at most {MAX_DELAY.days} days (about ten years), got {delay}"
            )
        super().__init__(reason or f"deferred for {delay}")
        self.delay = delay
        self.reason = reason


class StepReused(LeaseJobsError):
    """A step name was used twice in one pass (SPEC R6).

    The second call would silently return the first one's stored result
    instead of doing its own work, so it is refused outright.
    """

    def __init__(self, name: str) -> None:
        super().__init__(
            f"step {name!r} was already used in this pass; a step name identifies one unit "
            "of work, so give each step its own name (derive it from the cursor or an id)"
        )
        self.name = name


class StepInTransaction(LeaseJobsError):
    """A step was called inside a transaction the handler opened (SPEC R5).

    Its record would be written inside that transaction, and a rollback would
    erase it: the step would run again. Open the transaction inside the
    step's function instead.
    """

    def __init__(self, name: str) -> None:
        super().__init__(
            f"step {name!r} was called inside a transaction the handler opened; its record "
            "would be rolled back with that transaction and the step would run again. Open "
            "the transaction inside the step: p.step(name, lambda: atomic_work())"
        )
        self.name = name


class StepFailed(LeaseJobsError):
    """A step raised, or its attempts were already spent (SPEC R5, R7)."""

    def __init__(self, name: str, attempts: int, policy: Retry, error: str) -> None:
        super().__init__(error or f"step {name!r} failed")
        self.name = name
        self.attempts = attempts
        self.policy = policy
        self.error = error or f"step {name!r} failed"


class PassTimedOut(LeaseJobsError):
    """The pass ran past its job's ``timeout`` (SPEC R10); it will not commit."""


class DecodeFailed(LeaseJobsError):
    """A stored JSON column of the run (or a step result) does not parse (SPEC R9)."""


class UnreadableRow(LeaseJobsError):
    """A stored run cannot be read back, so its pass fails as a malformed row (SPEC R9, §12).

    ``run`` holds only what every row can be read for (id, job, counts).
    """

    def __init__(self, run: Any, reason: str) -> None:
        super().__init__(reason)
        self.run = run
        self.reason = reason


class PassAbandoned(LeaseJobsError):
    """The pass stopped without an outcome -- its worker died or lost its lease -- and
    the run was taken over (SPEC L3).

    Never raised: it names that attempt's error in a Django task's result (§9).
    """


class RunCancelled(LeaseJobsError):
    """An operator cancelled the run (SPEC §3 ``cancel``).

    Never raised: it names the error of a cancelled Django task's result (§9).
    """


class LeaseLost(BaseException):
    """This pass no longer holds its run (SPEC L6): it stops, writing nothing.

    A ``BaseException``, so a handler's ``except Exception`` does not swallow
    it; and even if a handler catches it, the pass has already recorded the
    loss and its outcome is ``superseded``.
    """


class PassInterrupted(BaseException):
    """The worker is shutting down and its stop timeout passed: stop at this step boundary.

    The pass is released, not failed: no attempt is charged, the steps it
    recorded stay in the ledger, and the run is due again at once.
    """
