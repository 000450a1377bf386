"""The step ledger of one pass: each step's memo, its record, its exhaustion (SPEC R5-R7).

A step that completed before -- in an earlier attempt of this pass's work
that failed later, or before the worker was killed -- returns its stored
result without calling its function. Otherwise the function runs and its
result is stored as the lease is renewed, in one transaction, so a completed
step never runs again for that work.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from django.db import connections

from . import store
from .codec import decode, encode_result
from .errors import describe
from .exceptions import (
    DecodeFailed,
    Defer,
    LeaseLost,
    PassInterrupted,
    PassTimedOut,
    StepFailed,
    StepInTransaction,
    StepReused,
)
from .leases import RENEW_BEFORE_STEP, Countdown
from .models import STEP_NAME_LENGTH
from .policy import Retry
from .pooled import put_back

if TYPE_CHECKING:
    from .leases import Lease
    from .models import Step

__all__ = ["STEP_NAME_LENGTH", "Ledger"]

T = TypeVar("T")

#: What a step's function may raise through it: the pass's own signals.
_PASSED_THROUGH = (Defer, PassTimedOut, LeaseLost, PassInterrupted, KeyboardInterrupt)


class Ledger:
    """One pass's steps over one run, recorded under its owner token."""

    __slots__ = ("_atomic_depth", "_cleared", "_lease", "_marks", "_memo", "_used")

    def __init__(self, lease: Lease) -> None:
        self._lease = lease
        #: A8: only a job not safe to repeat records a step as begun before it runs
        #: (the second write of its steps); every other job's step costs one write (§13).
        self._marks = not lease.spec.safe_to_repeat
        #: What an attempt's record does with that mark: clears it, or (``None``) has none.
        self._cleared: bool | None = False if self._marks else None
        # Read once per pass, and only if the claim saw rows (``has_steps``).
        self._memo: dict[str, Step] | None = None if lease.run.has_steps else {}
        self._used: set[str] = set()
        # Transactions open before the handler (a test's, say): a step inside
        # one the handler opened itself is refused (R5).
        self._atomic_depth = len(connections[store.alias()].atomic_blocks)

    def reserve(self, name: str, retry: Retry | None) -> None:
        """Refuse a step that cannot be taken, before it counts as used (R5, R6)."""
        store.check_key("a step name", name, STEP_NAME_LENGTH)
        if retry is not None and not isinstance(retry, Retry):
            raise TypeError(f"step {name!r}: retry must be a django_leasejobs.Retry, got {retry!r}")
        if name in self._used:
            raise StepReused(name)
        if len(connections[store.alias()].atomic_blocks) > self._atomic_depth:
            raise StepInTransaction(name)
        self._used.add(name)

    def run(self, name: str, fn: Callable[[], T], policy: Retry) -> T:
        """Return the step's stored result, or run *fn* and record it (R5, R7).

        Raises :class:`StepFailed` when *fn* raised or the step's attempts are
        spent, and :class:`LeaseLost` when the record was refused (L6).
        """
        if problem := policy.problem():
            raise ValueError(f"step {name!r}: {problem}")
        prior = self._steps().get(name)
        if prior is not None and prior.result is not None:
            return self._stored(name, prior.result)  # type: ignore[no-any-return]
        attempts = prior.attempts if prior is not None else 0
        if policy.exhausted(attempts):
            # Spent already (a crash after the last failed attempt was recorded):
            # calling fn again would be one more real call for a run that fails anyway.
            raise StepFailed(name, attempts, policy, prior.last_error if prior else "")
        exists = prior is not None
        if self._marks:
            # A8: the step's name is durable before its function runs, so that a run
            # held after a crash names the step that may have half-happened. This
            # write renews the lease too, so it stands for the renewal below.
            error = prior.last_error if prior is not None else ""
            self._write(name, None, attempts, error, exists=exists, began=True)
            exists = True
        elif self._lease.countdown.below(RENEW_BEFORE_STEP):
            self._renew()  # Do not start work on a lease that may already be gone.
        try:
            value = fn()
        except _PASSED_THROUGH:
            raise
        except BaseException as exc:  # SystemExit from a step is a failed attempt too
            error = describe(exc, prefix=f"step {name!r} failed: ")
            self._fail(name, attempts + 1, policy, error, exists=exists)
        try:
            text = encode_result(value)
        except Exception as exc:  # whatever the encoder raised, the step failed
            error = describe(exc, prefix=f"step {name!r} returned a value JSON cannot store: ")
            self._fail(name, attempts + 1, policy, error, exists=exists)
        self._write(name, text, attempts + 1, "", exists=exists, began=self._cleared)
        return json.loads(text)  # type: ignore[no-any-return]

    def renew(self) -> None:
        """Renew the lease (L7); raises :class:`LeaseLost` when it is gone."""
        self._renew()

    # -- internals ---------------------------------------------------------------------

    def _steps(self) -> dict[str, Step]:
        if self._memo is None:
            # Where the pass writes (§12): a router may send the run's own reads to a replica.
            steps = self._lease.run.steps.using(store.alias())
            self._memo = {step.name: step for step in steps}
            put_back()  # on Django's pool: the step's function may wait on an upstream
        return self._memo

    @staticmethod
    def _stored(name: str, text: str) -> Any:
        decoded = decode(text)
        if decoded.error:
            raise DecodeFailed(f"step {name!r}: stored result does not parse ({decoded.error})")
        return decoded.value

    def _renew(self) -> None:
        sent = Countdown.now()
        lease, countdown = self._lease, self._lease.countdown
        if not store.renew(lease.run_id, lease.owner, countdown.lease, strict=lease.strict):
            raise LeaseLost
        countdown.renewed(sent)
        put_back()

    def _write(
        self,
        name: str,
        result: str | None,
        attempts: int,
        error: str,
        *,
        exists: bool,
        began: bool | None = None,
    ) -> None:
        sent = Countdown.now()
        lease, countdown = self._lease, self._lease.countdown
        if not store.record_step(
            lease.run_id,
            lease.owner,
            countdown.lease,
            name,
            result=result,
            attempts=attempts,
            error=error,
            exists=exists,
            strict=lease.strict,
            began=began,
        ):
            raise LeaseLost
        countdown.renewed(sent)
        lease.record.steps_recorded = True
        put_back()

    def _fail(
        self, name: str, attempts: int, policy: Retry, error: str, *, exists: bool
    ) -> NoReturn:
        """Record the failed attempt (R5), then fail the step."""
        self._write(name, None, attempts, error, exists=exists, began=self._cleared)
        raise StepFailed(name, attempts, policy, error)
