"""The object a handler receives: one pass over one run (SPEC §3, R3-R10).

A handler reads ``p.payload`` and ``p.cursor``, does a bounded chunk of work
in named steps, and returns ``p.advance(next_cursor)``, ``p.done()`` or
``None`` (keep the cursor, not done).

What happened to the pass is not the handler's to say. The :class:`Pass`
tells a :class:`PassRecord` -- which the library keeps, and the handler never
sees -- whenever something decides the pass: its lease lost, its timeout
passed, a step failed, the worker stopping. A handler that catches
:class:`PassTimedOut` or a step's failure and returns anyway still gets a
failed pass, and one that catches the lease-lost signal still writes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from .exceptions import (
    DecodeFailed,
    LeaseLost,
    PassInterrupted,
    PassTimedOut,
    StepFailed,
    StepReused,
)
from .leases import RENEW_AT_CHECK
from .ledger import Ledger
from .policy import Retry
from .tracing import step_span
from .verdicts import PassRecord, Verdict
from .walking import Walk

if TYPE_CHECKING:
    from django.db.models import Model, QuerySet

    from .leases import Lease
    from .models import Run

__all__ = [
    "IDLE_PASSES_WARN",
    "IDLE_WARNING",
    "LeaseLost",
    "Pass",
    "PassRecord",
    "PassResult",
    "PassTimedOut",
    "RunRef",
    "StepReused",
    "Verdict",
]

T = TypeVar("T")
M = TypeVar("M", bound="Model")
#: ``progress_total`` is a 64-bit column.
TOTAL_MAX = 2**63 - 1
#: Passes in a row that returned with the cursor unchanged and no step recorded, after
#: which the run is reported once (log, drive warnings, admin): likely a handler that
#: forgets to return ``p.advance()`` or ``p.done()`` and so runs forever, due at once.
IDLE_PASSES_WARN = 100
IDLE_WARNING = (
    "{passes} passes in a row returned with the cursor unchanged and no step recorded; "
    "does the handler forget to return p.advance(cursor) or p.done()?"
)


@dataclass(frozen=True, slots=True)
class PassResult:
    """What a handler returns: build it with ``p.advance()`` or ``p.done()``."""

    done: bool
    cursor: Any = None
    has_cursor: bool = False
    result: Any = None


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

    __slots__ = (
        "_interrupt",
        "_lease",
        "_ledger",
        "attempt",
        "cursor",
        "payload",
        "run",
    )

    def __init__(self, lease: Lease, *, interrupt: Callable[[], bool] | None = None) -> None:
        """Decode the run for its handler: part of the pass, so a malformed row is an
        ordinary failed pass (R9), never an error that escapes the drive.

        Raises :class:`DecodeFailed` when the payload, cursor or counters do not parse.
        """
        row = lease.run
        self.run = RunRef(row.pk, row.job, row.instance)
        self.attempt = row.attempts + 1
        self._lease = lease
        self._interrupt = interrupt
        self.payload, self.cursor, lease.record.counters = _decoded(row)
        self._ledger = Ledger(lease)

    # -- reading the run ------------------------------------------------------

    @property
    def counters(self) -> Mapping[str, int | float]:
        return MappingProxyType(self._lease.record.counters)

    # -- what a handler calls ----------------------------------------------------

    def count(self, name: str, by: int | float = 1) -> None:
        """Add *by* to counter *name*; kept only if this pass commits."""
        if not isinstance(name, str) or not name:
            raise TypeError("a counter name is a non-empty str")
        if isinstance(by, bool) or not isinstance(by, int | float) or not math.isfinite(by):
            raise TypeError(f"count() adds a finite int or float, got {by!r}")
        counters = self._lease.record.counters
        counters[name] = counters.get(name, 0) + by

    def total(self, n: int) -> None:
        """Say how many units the whole run has, for the admin's progress bar."""
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= TOTAL_MAX:
            raise TypeError(f"total() takes an int from 0 to 2**63 - 1, got {n!r}")
        self._lease.record.progress_total = n

    def advance(self, cursor: Any) -> PassResult:
        """Return this from the handler: commit, and resume the next pass from *cursor*.

        ``advance(None)`` is a real cursor, meaning "start over" (R3); to keep
        the current cursor, return ``None`` from the handler instead.
        """
        return PassResult(done=False, cursor=cursor, has_cursor=True)

    def done(self, result: Any = None) -> PassResult:
        """Return this from the handler: commit, and finish the run.

        *result*, when given, is stored in the run's ``result`` (JSON values
        only, R2): what the run came to, for whoever reads the run later. A
        result that JSON would not return unchanged fails the pass, naming
        its path (``result.rows.3``).
        """
        return PassResult(done=True, result=result)

    def walk(
        self,
        queryset: QuerySet[M],
        fn: Callable[[list[M]], object],
        *,
        size: int = 500,
        total: bool = False,
    ) -> PassResult:
        """Do the next batch of *queryset* after the cursor; return this from the handler.

        Reads the next at most *size* objects in primary-key order after the
        cursor (the last key done; ``None``: from the start), calls ``fn(batch)``
        -- a list of model instances -- as the step ``walk:<first pk>``, so a batch
        done before a crash is not done again (R5), and counts them in
        ``walked``. Returns ``advance(<last pk>)``, or ``done()`` once a batch
        is empty or shorter than *size*. With ``total=True`` the first pass
        (cursor ``None``) also sets ``total(queryset.count())``. A key that is
        not a JSON value (a UUID) is kept in the cursor as text.

        Raises :class:`TypeError` or :class:`ValueError` for what cannot be
        walked -- not a ``QuerySet``, a sliced one, a *size* that is not an int
        of at least 1 -- before anything is read.
        """
        walk = Walk.over(queryset, size)
        if not isinstance(total, bool):
            raise TypeError(f"walk() takes total= as a bool, got {total!r}")
        if total and self.cursor is None:
            self.total(walk.queryset.count())
        batch = walk.batch_after(self.cursor)
        if not batch:
            return self.done()
        # The stored result, not the batch read now, says what was done: a replay after
        # a crash goes on from the same key even if rows joined the batch's range since.
        did = self.step(walk.step_name(batch[0]), lambda: walk.do(batch, fn))
        self.count("walked", did["walked"])
        return self.done() if did["walked"] < size else self.advance(did["last"])

    @property
    def lease_owner(self) -> str:
        """This pass's lease token, which fences its writes (L6).

        For code that writes beside the pass -- the tasks backend records each
        attempt under it (SPEC §9).
        """
        return self._lease.owner

    def timed_out(self) -> bool:
        """Whether the pass has run past its job's ``timeout`` (R10); it will not commit."""
        return self._lease.record.timed_out()

    def lease_left(self) -> timedelta:
        """How much of the lease is left by this worker's own monotonic count."""
        return self._lease.countdown.left()

    def check(self) -> None:
        """Stop here if the pass timed out or lost its lease; renew a lease running low.

        Raises :class:`PassTimedOut` after the job's ``timeout``. A handler with
        a long stretch between steps calls this to keep its lease (L7).
        """
        self._boundary()
        if self._lease.countdown.below(RENEW_AT_CHECK):
            self._lost_if(self._ledger.renew)

    def step(self, name: str, fn: Callable[[], T], *, retry: Retry | None = None) -> T:
        """Run *fn* once for this pass's work, remembering its result (R5-R7).

        A step that completed before -- in an earlier attempt of this pass that
        failed later, or before the worker was killed -- returns its stored
        result without calling *fn*. Otherwise *fn* runs and its result is
        stored (``DjangoJSONEncoder``) as the lease is renewed, in one
        transaction. Either way the value returned is decoded from the stored
        JSON, so it has the same shape on the first call and on a replay: a
        JSON value as *fn* returned it, or the string a ``datetime``,
        ``Decimal`` or ``UUID`` is stored as.

        Refused inside a transaction the handler opened (``StepInTransaction``):
        a rollback would erase the record and the step would run again.
        """
        self._ledger.reserve(name, retry)
        self._boundary()
        try:
            policy = retry or self._lease.spec.retry
            with step_span(name):  # O3, when OpenTelemetry is there
                return self._lost_if(lambda: self._ledger.run(name, fn, policy))
        except StepFailed as failure:
            self._lease.record.decide(Verdict.STEP_FAILED, failure)
            raise

    # -- internals ---------------------------------------------------------------

    def _boundary(self) -> None:
        """A step boundary: where a pass learns it must stop (L6, R10, a shutdown)."""
        if self._lease.record.verdict is Verdict.LOST:
            raise LeaseLost
        if self._interrupt is not None and self._interrupt():
            self._lease.record.decide(Verdict.INTERRUPTED)
            raise PassInterrupted
        if self._lease.record.timed_out():
            raise PassTimedOut(f"the pass ran longer than its timeout ({self._lease.spec.timeout})")

    def _lost_if(self, write: Callable[[], T]) -> T:
        """Run a fenced *write*; a refusal means the lease is gone, for good (L6)."""
        try:
            return write()
        except LeaseLost:
            self._lease.record.decide(Verdict.LOST)
            raise


def _decoded(row: Run) -> tuple[Any, Any, dict[str, int | float]]:
    """The run's payload, cursor and counters, decoded; :class:`DecodeFailed` if they do not."""
    fields = row.decoded()
    if broken := {name: value.error for name, value in fields.items() if value.error}:
        detail = "; ".join(f"{name}: {error}" for name, error in broken.items())
        raise DecodeFailed(f"the run's stored JSON does not parse ({detail})")
    counters = fields["counters"].value
    if not isinstance(counters, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in counters.values()
    ):
        raise DecodeFailed("the run's counters are not a JSON object of numbers")
    return fields["payload"].value, fields["cursor"].value, dict(counters)
