"""The object a handler receives: one pass over one run (SPEC §3, R3-R10).

A handler reads ``p.payload`` and ``p.cursor``, does a bounded chunk of work
in named steps, and returns ``p.advance(next_cursor)``, ``p.done()`` or
``None`` (keep the cursor, not done).

What happened to the pass is kept as *state on this object*, not only as an
exception in flight: a handler that catches :class:`PassTimedOut` or a step's
failure and returns anyway still gets a failed pass, and one that catches the
lease-lost signal still writes nothing.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from django.db import connections

from . import store
from .codec import decode, encode_result
from .errors import describe
from .exceptions import Defer, LeaseJobsError
from .policy import Retry

if TYPE_CHECKING:
    from .models import Run, Step
    from .registry import Job

__all__ = ["Pass", "PassResult", "PassTimedOut", "RunRef", "StepReused"]

T = TypeVar("T")
STEP_NAME_LENGTH = 200
#: ``progress_total`` is a 64-bit column.
TOTAL_MAX = 2**63 - 1


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


class PassTimedOut(LeaseJobsError):
    """The pass ran past its job's ``timeout`` (SPEC R10); it will not commit."""


class LeaseLost(BaseException):
    """This pass no longer holds its run (SPEC L6): it stops, writing nothing.

    A ``BaseException``, like ``asyncio.CancelledError``, so a handler's
    ``except Exception`` does not swallow it; and even if a handler catches
    it, the pass has already recorded the loss and its outcome is
    ``superseded``.
    """


class PassInterrupted(BaseException):
    """The worker is shutting down and its stop timeout passed: stop at this step boundary.

    The pass is released, not failed: no attempt is charged, the steps it
    recorded stay in the ledger, and the run is due again at once.
    """


class StepFailed(LeaseJobsError):
    """A step raised, or its attempts were already spent (SPEC R5, R7)."""

    def __init__(self, name: str, attempts: int, policy: Retry, error: str) -> None:
        super().__init__(error)
        self.name = name
        self.attempts = attempts
        self.policy = policy
        self.error = error


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


class DecodeFailed(LeaseJobsError):
    """A stored JSON column of the run (or a step result) does not parse (SPEC R9)."""


@dataclass(frozen=True, slots=True)
class PassResult:
    """What a handler returns: build it with ``p.advance()`` or ``p.done()``."""

    done: bool
    cursor: Any = None
    has_cursor: bool = False


class RunRef(NamedTuple):
    """Which run a pass belongs to."""

    id: str
    job: str
    instance: str


class Pass:
    """One pass of a handler over a run.

    Attributes
    ----------
    payload:
        The run's payload, as given to ``start()``.
    cursor:
        What the last committed pass handed forward; ``None`` before the first.
    counters:
        The run's counters (a read-only mapping of numbers), including this
        pass's counts; :meth:`count` is the only way to change one (R5).
    run:
        ``(id, job, instance)`` of the run.
    attempt:
        Which attempt this pass is: 1 unless earlier passes failed in a row.
    """

    def __init__(
        self,
        run: Run,
        spec: Job,
        owner: str,
        claim_sent: float,
        interrupt: Callable[[], bool] | None = None,
    ) -> None:
        self.run = RunRef(run.pk, run.job, run.instance)
        self.attempt = run.attempts + 1
        self.payload: Any = None
        self.cursor: Any = None
        self._counters: dict[str, int | float] = {}
        self._row = run
        self._spec = spec
        self._owner = owner
        self._lease = spec.effective_lease
        self._lease_from = claim_sent  # monotonic time just before the claim/renewal was sent
        self._started = time.monotonic()
        self._used: set[str] = set()
        self._ledger: dict[str, Step] | None = None if run.has_steps else {}
        self._progress_total: int | None = None
        self._interrupt = interrupt
        # Transactions open before the handler (a test's, say): a step inside
        # one the handler opened itself is refused (R5).
        self._atomic_depth = len(connections[store.alias()].atomic_blocks)
        # What happened, kept on the pass so no handler can talk its way out of it.
        self.recorded_steps = False
        self.lost = False
        self.timed_out = False
        self.step_failure: StepFailed | None = None

    # -- reading the run ------------------------------------------------------

    def load(self) -> None:
        """Decode payload, cursor and counters: part of the pass, so a malformed row
        is an ordinary failed pass (R9), never an error that escapes the drive."""
        fields = {
            "payload": self._row.decoded_payload(),
            "cursor": self._row.decoded_cursor(),
            "counters": self._row.decoded_counters(),
        }
        broken = {name: value.error for name, value in fields.items() if value.error}
        if broken:
            detail = "; ".join(f"{name}: {error}" for name, error in broken.items())
            raise DecodeFailed(f"the run's stored JSON does not parse ({detail})")
        counters = fields["counters"].value
        if not isinstance(counters, dict) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in counters.values()
        ):
            raise DecodeFailed("the run's counters are not a JSON object of numbers")
        self.payload = fields["payload"].value
        self.cursor = fields["cursor"].value
        self._counters = dict(counters)

    @property
    def counters(self) -> Mapping[str, int | float]:
        return MappingProxyType(self._counters)

    # -- what a handler calls ----------------------------------------------------

    def count(self, name: str, by: int | float = 1) -> None:
        """Add *by* to counter *name*; kept only if this pass commits."""
        if not isinstance(name, str) or not name:
            raise TypeError("a counter name is a non-empty str")
        if isinstance(by, bool) or not isinstance(by, int | float) or not math.isfinite(by):
            raise TypeError(f"count() adds a finite int or float, got {by!r}")
        self._counters[name] = self._counters.get(name, 0) + by

    def total(self, n: int) -> None:
        """Say how many units the whole run has, for the admin's progress bar."""
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= TOTAL_MAX:
            raise TypeError(f"total() takes an int from 0 to 2**63 - 1, got {n!r}")
        self._progress_total = n

    def advance(self, cursor: Any) -> PassResult:
        """Return this from the handler: commit, and resume the next pass from *cursor*.

        ``advance(None)`` is a real cursor, meaning "start over" (R3); to keep
        the current cursor, return ``None`` from the handler instead.
        """
        return PassResult(done=False, cursor=cursor, has_cursor=True)

    def done(self) -> PassResult:
        """Return this from the handler: commit, and finish the run."""
        return PassResult(done=True)

    def lease_left(self) -> timedelta:
        """How much of the lease is left by this worker's own monotonic count."""
        return self._lease - timedelta(seconds=time.monotonic() - self._lease_from)

    def check(self) -> None:
        """Stop here if the pass timed out or lost its lease; renew a lease running low.

        Raises :class:`PassTimedOut` after the job's ``timeout``. A handler with
        a long stretch between steps calls this to keep its lease (L7).
        """
        self._boundary()
        if self.lease_left() < self._lease / 2:
            self._renew()

    def step(self, name: str, fn: Callable[[], T], *, retry: Retry | None = None) -> Any:
        """Run *fn* once for this pass's work, remembering its result (R5-R7).

        A step that completed before -- in an earlier attempt of this pass that
        failed later, or before the worker was killed -- returns its stored
        result without calling *fn*. Otherwise *fn* runs and its result is
        stored (``DjangoJSONEncoder``) as the lease is renewed, in one
        transaction. Either way the value returned is decoded from the stored
        JSON, so it has the same shape on the first call and on a replay.
        """
        store.check_key("a step name", name, STEP_NAME_LENGTH)
        if retry is not None and not isinstance(retry, Retry):
            raise TypeError(f"step {name!r}: retry must be a django_leasejobs.Retry, got {retry!r}")
        if name in self._used:
            raise StepReused(name)
        if len(connections[store.alias()].atomic_blocks) > self._atomic_depth:
            raise StepInTransaction(name)
        self._used.add(name)
        self._boundary()
        policy = retry if retry is not None else self._spec.retry
        if problem := policy.problem():
            raise ValueError(f"step {name!r}: {problem}")

        prior = self._steps().get(name)
        if prior is not None and prior.result is not None:
            return self._stored(name, prior.result)
        attempts = prior.attempts if prior is not None else 0
        if policy.exhausted(attempts):
            # Spent already (a crash after the last failed attempt was recorded):
            # calling fn again would be one more real call for a run that fails anyway.
            self._fail_step(name, attempts, policy, prior.last_error if prior else "")
        if self.lease_left() < self._lease * 0.25:
            self._renew()  # Do not start work on a lease that may already be gone.

        try:
            value = fn()
        except (Defer, PassTimedOut, LeaseLost, PassInterrupted, KeyboardInterrupt):
            raise
        except BaseException as exc:  # SystemExit from a step is a failed attempt too
            error = describe(exc, prefix=f"step {name!r} failed: ")
            self._record(name, None, attempts + 1, error, exists=prior is not None)
            self._fail_step(name, attempts + 1, policy, error)
        try:
            text = encode_result(value)
        except Exception as exc:
            error = describe(exc, prefix=f"step {name!r} returned a value JSON cannot store: ")
            self._record(name, None, attempts + 1, error, exists=prior is not None)
            self._fail_step(name, attempts + 1, policy, error)
        self._record(name, text, attempts + 1, "", exists=prior is not None)
        return json.loads(text)

    # -- internals ---------------------------------------------------------------

    @property
    def progress_total(self) -> int | None:
        return self._progress_total

    def past_timeout(self) -> bool:
        timeout = self._spec.timeout
        return timeout is not None and time.monotonic() - self._started > timeout.total_seconds()

    def _boundary(self) -> None:
        if self.lost:
            raise LeaseLost
        if self._interrupt is not None and self._interrupt():
            raise PassInterrupted
        if self.timed_out or self.past_timeout():
            self.timed_out = True
            raise PassTimedOut(f"the pass ran longer than its timeout ({self._spec.timeout})")

    def _lose(self) -> None:
        self.lost = True
        raise LeaseLost

    def _renew(self) -> None:
        sent = time.monotonic()
        if not store.renew(self.run.id, self._owner, self._lease):
            self._lose()
        self._lease_from = sent

    def _steps(self) -> dict[str, Step]:
        """The run's step ledger, read once per pass and only if the claim saw rows."""
        if self._ledger is None:
            self._ledger = {step.name: step for step in self._row.steps.all()}
        return self._ledger

    def _stored(self, name: str, text: str) -> Any:
        decoded = decode(text)
        if decoded.error:
            raise DecodeFailed(f"step {name!r}: stored result does not parse ({decoded.error})")
        return decoded.value

    def _record(
        self, name: str, result: str | None, attempts: int, error: str, *, exists: bool
    ) -> None:
        sent = time.monotonic()
        if not store.record_step(
            self.run.id,
            self._owner,
            self._lease,
            name,
            result=result,
            attempts=attempts,
            error=error,
            exists=exists,
        ):
            self._lose()
        self._lease_from = sent
        self.recorded_steps = True

    def _fail_step(self, name: str, attempts: int, policy: Retry, error: str) -> Any:
        self.step_failure = StepFailed(name, attempts, policy, error or f"step {name!r} failed")
        raise self.step_failure
