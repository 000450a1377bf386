"""What decided a pass: its :class:`Verdict`, kept in a :class:`PassRecord` the handler never sees.

The handler's :class:`~.passes.Pass` tells the record whenever something
decides the pass -- its lease lost, its timeout passed, a step failed, the
worker stopping -- and a weightier verdict always overrides a lighter one, so
a handler that catches :class:`~.exceptions.PassTimedOut` or a step's failure
and returns anyway still gets a failed pass. The conclusion reads the verdict
first (:mod:`.conclusion`).

Two threads tell one record: the pass's own, and its heartbeat's (L10),
which marks the pass lost or timed out. Each check-then-set is therefore one step under
the record's lock, so the weightier verdict wins whatever the interleaving.
"""

from __future__ import annotations

import enum
import threading
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
        "_lock",
        "_timeout",
        "_verdict",
        "counters",
        "progress_total",
        "steps_recorded",
    )

    def __init__(self, timeout: timedelta | None) -> None:
        # Guards the verdict and its failed step, which the heartbeat's thread
        # decides too (L10): every write of them is made under it, in decide().
        self._lock = threading.Lock()
        self._verdict = Verdict.OPEN
        self._failed_step: StepFailed | None = None
        self._timeout = timeout
        # Written once by begin(), before the heartbeat's thread starts; read-only after.
        self._deadline: float | None = None
        # The rest are the pass's own thread's alone: its Pass, ledger and conclusion.
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

    def decide(self, verdict: Verdict, failed_step: StepFailed | None = None) -> Verdict:
        """Record *verdict* unless a weightier one already stands; return the one that stands.

        Atomic: the pass's thread and its heartbeat's may decide at once, and
        the weightier verdict wins whichever of them reads first.
        """
        with self._lock:
            if verdict > self._verdict:
                self._verdict = verdict
                if failed_step is not None:
                    self._failed_step = failed_step
            return self._verdict

    def timed_out(self) -> bool:
        """Whether the pass has run past its job's timeout (R10); once past, for good."""
        if self._deadline is not None and time.monotonic() > self._deadline:
            return self.decide(Verdict.TIMED_OUT) is Verdict.TIMED_OUT
        return self._verdict is Verdict.TIMED_OUT

    def conclude(self) -> Verdict:
        """The verdict once the handler has ended, its timeout judged one last time."""
        self.timed_out()
        return self._verdict
