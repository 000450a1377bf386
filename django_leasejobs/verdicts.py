"""What decided a pass: its :class:`Verdict`, kept in a :class:`PassRecord` the handler never sees.

The handler's :class:`~.passes.Pass` tells the record whenever something
decides the pass -- its lease lost, its timeout passed, a step failed, the
worker stopping -- and a weightier verdict always overrides a lighter one, so
a handler that catches :class:`~.exceptions.PassTimedOut` or a step's failure
and returns anyway still gets a failed pass. The conclusion reads the verdict
first (:mod:`.conclusion`).
"""

from __future__ import annotations

import enum
import time
from datetime import timedelta

from .exceptions import StepFailed

__all__ = ["PassRecord", "Verdict"]


class Verdict(enum.IntEnum):
    """What decided a pass before its handler's ending could; a higher one overrides a lower."""

    OPEN = 0  # nothing yet: the handler's return (or exception) decides
    STEP_FAILED = 1  # a step failed or was spent (R5, R7): judged by the step's policy
    TIMED_OUT = 2  # past the job's timeout (R10): judged by the job's policy
    INTERRUPTED = 3  # the worker is stopping: released, uncharged
    LOST = 4  # the lease is gone (L6): superseded, nothing more is written


class PassRecord:
    """What happened to one pass: kept by the library, told by the :class:`Pass`.

    The timeout is judged here, and only here (R10): at each step boundary
    and once more when the handler has ended.
    """

    __slots__ = (
        "_deadline",
        "_failed_step",
        "_timeout",
        "_verdict",
        "counters",
        "progress_total",
        "steps_recorded",
    )

    def __init__(self, timeout: timedelta | None) -> None:
        self._verdict = Verdict.OPEN
        self._failed_step: StepFailed | None = None
        self._timeout = timeout
        self._deadline: float | None = None
        self.counters: dict[str, int | float] = {}
        self.progress_total: int | None = None
        #: Whether the pass wrote a step row: its commit then drops the ledger.
        self.steps_recorded = False

    def begin(self) -> None:
        """BEGIN wrote (L4): the job's timeout counts from now (R10)."""
        if self._timeout is not None:
            self._deadline = time.monotonic() + self._timeout.total_seconds()

    @property
    def verdict(self) -> Verdict:
        return self._verdict

    @property
    def failed_step(self) -> StepFailed | None:
        """The step failure behind ``STEP_FAILED``."""
        return self._failed_step

    def decide(self, verdict: Verdict, failed_step: StepFailed | None = None) -> None:
        """Record *verdict* unless a weightier one already stands."""
        if verdict > self._verdict:
            self._verdict = verdict
            self._failed_step = failed_step or self._failed_step

    def timed_out(self) -> bool:
        """Whether the pass has run past its job's timeout (R10); once past, for good."""
        if self._deadline is not None and time.monotonic() > self._deadline:
            self.decide(Verdict.TIMED_OUT)
        return self._verdict is Verdict.TIMED_OUT

    def conclude(self) -> Verdict:
        """The verdict once the handler has ended, its timeout judged one last time."""
        self.timed_out()
        return self._verdict
