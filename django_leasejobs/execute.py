"""One run, walked along the data path: claim -> begin -> pass -> commit or settle.

The drive (:mod:`.driver`) calls :func:`drive_run` for each run it picked.
A pass ends with a verdict (what decided it: its lease, its timeout, a step,
a shutdown -- :class:`~.passes.Verdict`) and an ending (what its handler
returned or raised); :func:`_conclude` maps the two to one store verb, in one
place. Every write goes through :mod:`.store`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from django.db import DatabaseError

from . import saturation, signals, store
from .codec import encode
from .errors import connection_lost, describe
from .exceptions import DecodeFailed, Defer, NotQueueSafe, StepFailed, UnreadableRow
from .heartbeat import Heartbeat
from .holder import current_holder
from .ids import new_owner
from .leases import TAKEOVER_NOTE, Countdown
from .models import Run
from .passes import Pass, PassRecord, PassResult, Verdict
from .schedules.reading import record_outcome
from .states import FailureCode, PassOutcome, RunStatus, Throttle
from .store.limits import THROTTLE_WAIT, THROTTLE_WAIT_MIN

if TYPE_CHECKING:
    from .registry import Job

__all__ = ["Claimed", "Outcome", "drive_run"]

logger = logging.getLogger("django_leasejobs")


@dataclass(frozen=True)
class Outcome:
    """What one pass (or one attempt to begin one) came to."""

    status: PassOutcome
    error: str = ""
    warning: str = ""
    #: A throttled pass: which limit refused it, and when the run is due again.
    throttle: Throttled | None = None


class Throttled(NamedTuple):
    """What a throttled pass hands the drive, so it holds back the key's other runs (C4)."""

    key: str
    which: Throttle
    until: datetime | None
    wait: timedelta


SUPERSEDED = Outcome(PassOutcome.SUPERSEDED)


class Claimed(NamedTuple):
    """A claim the drive made ahead of the run's turn (:mod:`.pacing`): the first pass's start.

    ``found`` is the run as claimed, or the :class:`UnreadableRow` it could
    not be read back as; ``countdown`` has counted since that claim was sent.
    """

    found: Run | UnreadableRow
    owner: str
    countdown: Countdown


class Ending(NamedTuple):
    """How the handler's call ended: what it returned, or what it raised."""

    result: object = None
    error: BaseException | None = None


def drive_run(
    run_id: str,
    spec: Job,
    *,
    took_over: bool,
    max_passes: int,
    stop: Callable[[], bool],
    interrupt: Callable[[], bool] | None = None,
    claimed: Claimed | None = None,
) -> list[Outcome]:
    """Run up to *max_passes* passes of one run; return each pass's outcome (D3).

    An empty list means the claim was lost: another drive has the run. Each
    pass claims afresh under a new owner token and reads back what the last
    one committed -- but the first, when the drive *claimed* it ahead.
    """
    outcomes: list[Outcome] = []
    for number in range(max_passes):
        if number and stop():
            break
        first = number == 0
        outcome = _one_pass(
            run_id,
            spec,
            took_over=took_over and first,
            interrupt=interrupt,
            claimed=claimed if first else None,
        )
        if outcome is None:
            break
        outcomes.append(outcome)
        if outcome.status != PassOutcome.ADVANCED:
            break
    return outcomes


def _one_pass(
    run_id: str,
    spec: Job,
    *,
    took_over: bool,
    interrupt: Callable[[], bool] | None,
    claimed: Claimed | None,
) -> Outcome | None:
    unreadable: UnreadableRow | None = None
    if claimed is None:
        owner = new_owner()
        # Counted from before the claim is sent: the round trip counts against us (L1).
        countdown = Countdown(spec.effective_lease, Countdown.now())
        try:
            run = store.take(run_id, owner, countdown.lease, current_holder(), takeover=took_over)
        except UnreadableRow as exc:
            unreadable, run = exc, exc.run
        if run is None:
            return None
    else:
        owner, countdown = claimed.owner, claimed.countdown
        if isinstance(claimed.found, UnreadableRow):
            unreadable, run = claimed.found, claimed.found.run
        else:
            run = claimed.found
    if spec.per_run is not None and unreadable is None:
        spec = spec.per_run(run)  # a task's own retry policy, timeout and repeat rule (§9)
    if took_over:
        # The claim charged the interrupted pass one attempt (L3).
        if not spec.safe_to_repeat:
            return _hold(run, owner)
        if spec.retry.exhausted(run.attempts):
            code = FailureCode.LEASE_EXPIRED
            return _settle(run, spec, owner, code, TAKEOVER_NOTE, run.attempts, None)
    if spec.limit is None:
        if not countdown.can_begin() or not store.begin(run_id, owner, countdown.margin):
            return _admission_miss(run, spec, owner, countdown)
    else:
        if not countdown.can_begin():
            return _admission_miss(run, spec, owner, countdown)
        key = run.limit_key or ""
        admission = store.begin_limited(
            run_id, owner, countdown.margin, job=spec.name, key=key, limit=spec.limit
        )
        if admission.throttle is not None:
            return _throttled(run, spec, owner, admission)
        if not admission.begun:
            return _admission_miss(run, spec, owner, countdown)
        saturation.began(spec.name, key)
        # Its slot is as alive as its lease: no renewal may revive an expired one (C2).
        countdown.strict = spec.limit.concurrency is not None
    # BEGIN wrote: the pass is committed to running (L4), whatever happens next.
    if unreadable is not None:
        # Reading the row is part of the pass: a row the database cannot hand
        # back fails like one whose JSON does not parse (R9, §12).
        error = f"UnreadableRow: {unreadable.reason}"
        return _fail(run, spec, owner, FailureCode.DECODE_FAILED, error)
    record = PassRecord(spec.timeout)
    # L10: a handler with no step boundaries keeps its lease from a side thread.
    beating: AbstractContextManager[object] = (
        Heartbeat(run.pk, owner, countdown, record) if spec.heartbeat else nullcontext()
    )
    try:
        p = Pass(run, spec, owner, countdown, record, interrupt=interrupt)
        with beating:
            ending = Ending(result=spec.handler(p))
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # LeaseLost and PassInterrupted too; SystemExit is a failure
        ending = Ending(error=exc)
    return _conclude(run, spec, owner, record, ending)


def _conclude(run: Run, spec: Job, owner: str, record: PassRecord, ending: Ending) -> Outcome:
    """What decided the pass, else how its handler ended, as one store verb (R3-R10, L6)."""
    verdict = record.conclude()
    if verdict is Verdict.LOST:
        return _superseded(run, owner)
    if verdict is Verdict.INTERRUPTED:
        # Shutting down: hand the run back at this step boundary, uncharged.
        if not store.defer(run, owner, timedelta(0)):
            return _superseded(run, owner)
        warning = "released at a step boundary: the worker is stopping"
        return Outcome(PassOutcome.DEFERRED, warning=warning)
    if verdict is Verdict.TIMED_OUT:
        error = f"PassTimedOut: the pass ran past {spec.timeout}"
        return _fail(run, spec, owner, FailureCode.TIMEOUT, error)
    if verdict is Verdict.STEP_FAILED:
        assert record.failed_step is not None
        return _fail_step(run, spec, owner, record.failed_step)
    # Nothing decided the pass: its handler's ending does.
    if isinstance(ending.error, Defer):
        if not store.defer(run, owner, ending.error.delay):
            return _superseded(run, owner)
        return Outcome(PassOutcome.DEFERRED)
    if isinstance(ending.error, DecodeFailed):
        return _fail(run, spec, owner, FailureCode.DECODE_FAILED, describe(ending.error))
    if ending.error is not None:
        return _fail(run, spec, owner, FailureCode.HANDLER_FAILED, describe(ending.error))
    return _commit(run, spec, owner, record, ending.result)


def _commit(run: Run, spec: Job, owner: str, record: PassRecord, result: object) -> Outcome:
    """R3: commit what the handler returned, once it is known to be storable."""
    if result is not None and not isinstance(result, PassResult):
        problem = TypeError(
            f"the handler returned {type(result).__name__}; return p.advance(cursor), "
            "p.done() or None"
        )
        return _fail(run, spec, owner, FailureCode.HANDLER_FAILED, describe(problem))
    try:
        cursor = run.cursor
        if result is not None and result.has_cursor:
            cursor = encode(result.cursor, "cursor")
        counters = encode(record.counters, "counters")
        returned = None if result is None else result.result
        stored = None if returned is None else encode(returned, "result")
    except NotQueueSafe as exc:
        return _fail(run, spec, owner, FailureCode.HANDLER_FAILED, describe(exc))
    done = result is not None and result.done
    written: dict[str, Any] = {"cursor": cursor, "counters": counters}
    if stored is not None:
        written["result"] = stored
    try:
        committed = store.commit(
            run,
            owner,
            done=done,
            progress_total=record.progress_total,
            drop_steps=record.steps_recorded or run.has_steps,
            **written,
        )
    except DatabaseError as exc:
        if connection_lost(store.alias()):
            raise
        # The database refused a value the checks let through: the pass
        # failed, with the database's reason, rather than leaving it begun.
        error = describe(exc, prefix="the pass's outcome could not be stored: ")
        return _fail(run, spec, owner, FailureCode.HANDLER_FAILED, error)
    if not committed:
        return _superseded(run, owner)
    if not done:
        return Outcome(PassOutcome.ADVANCED)
    if spec.schedule:
        record_outcome(run, RunStatus.DONE)
    finished = run.as_written(
        status=RunStatus.DONE,
        attempts=0,
        failure_code="",
        last_error="",
        live_key=None,
        lease_owner=None,
        lease_began_at=None,
        **written,
    )
    _send(signals.run_completed, finished)
    return Outcome(PassOutcome.COMPLETED)


def _fail(run: Run, spec: Job, owner: str, code: FailureCode, error: str) -> Outcome:
    """R4: a failed pass, charged one attempt and judged by the job's retry policy."""
    attempts = run.attempts + 1
    retry_in = None if spec.retry.exhausted(attempts) else spec.retry.delay(attempts)
    return _settle(run, spec, owner, code, error, attempts, retry_in)


def _fail_step(run: Run, spec: Job, owner: str, failure: StepFailed) -> Outcome:
    """R7: a failed step is judged by its own count and policy; the run still counts the pass."""
    exhausted = failure.policy.exhausted(failure.attempts)
    code = FailureCode.STEP_EXHAUSTED if exhausted else FailureCode.HANDLER_FAILED
    retry_in = None if exhausted else failure.policy.delay(failure.attempts)
    return _settle(run, spec, owner, code, failure.error, run.attempts + 1, retry_in)


def _settle(  # noqa: PLR0917 - the columns a settle writes
    run: Run,
    spec: Job,
    owner: str,
    code: FailureCode,
    error: str,
    attempts: int,
    retry_in: timedelta | None,
) -> Outcome:
    if not store.settle(
        run, owner, attempts=attempts, failure_code=code, error=error, retry_in=retry_in
    ):
        return _superseded(run, owner)
    if retry_in is not None:
        logger.warning(
            "Run retrying id=%s job=%s attempt=%s code=%s in=%s",
            run.pk,
            run.job,
            attempts,
            code,
            retry_in,
        )
        return Outcome(PassOutcome.RETRYING, error=error)
    if spec.schedule:
        record_outcome(run, RunStatus.FAILED)
    failed = run.as_written(
        status=RunStatus.FAILED, attempts=attempts, failure_code=code, last_error=error
    )
    _send(signals.run_failed, failed, failure_code=code, error=error)
    return Outcome(PassOutcome.FAILED, error=error)


def _hold(run: Run, owner: str) -> Outcome:
    if not store.hold(run, owner):
        return _superseded(run, owner)
    held = run.as_written(status=RunStatus.HELD, failure_code=FailureCode.INTERRUPTED)
    _send(signals.run_held, held)
    return Outcome(PassOutcome.HELD, error=TAKEOVER_NOTE)


def _superseded(run: Run, owner: str) -> Outcome:
    """The pass lost its run. If an operator cancelled it, the key is freed now (§3 cancel)."""
    store.stop_cancelled(run.pk, owner)
    return SUPERSEDED


def _throttled(run: Run, spec: Job, owner: str, admission: store.Admission) -> Outcome:
    """C2, C3: the job's limit refused the pass; it ran nothing and is charged nothing.

    Refused a slot, the run is due again after about one of the job's passes
    (the time a slot takes to free), between 50 ms and a second; refused by
    its rate, when the rate next allows a begin.
    """
    from .pacing import pace  # here, not at the top: pacing imports this module

    which = admission.throttle
    assert which is not None
    typical = pace.seconds(spec.name)
    wait = THROTTLE_WAIT if typical is None else timedelta(seconds=typical)
    wait = min(THROTTLE_WAIT, max(THROTTLE_WAIT_MIN, wait))
    if not store.throttle(run.pk, owner, which, admission.until, wait):
        return SUPERSEDED
    key = run.limit_key or ""
    saturation.refused(spec.name, key, which)
    return Outcome(PassOutcome.THROTTLED, throttle=Throttled(key, which, admission.until, wait))


def _admission_miss(run: Run, spec: Job, owner: str, countdown: Countdown) -> Outcome:
    """L5: the claim could not begin in time; nothing ran, nothing is charged."""
    waited = countdown.lease - countdown.left()

    def note(misses: int) -> str:
        return (
            f"job {spec.name!r}: claim not begun in time (lease {countdown.lease}, "
            f"margin {countdown.margin}, claim to begin took {waited}); admission miss "
            f"{misses} of {store.ADMISSION.max_attempts}"
        )

    missed = store.miss(run.pk, owner, note((run.admission_misses or 0) + 1))
    if missed is None:
        return SUPERSEDED
    warning = note(missed.misses)
    logger.warning("Admission miss id=%s %s", run.pk, warning)
    if not missed.failed:
        return Outcome(PassOutcome.SUPERSEDED, warning=warning)
    code = FailureCode.LEASE_TOO_SHORT
    failed = run.as_written(status=RunStatus.FAILED, failure_code=code, last_error=warning)
    _send(signals.run_failed, failed, failure_code=code, error=warning)
    return Outcome(PassOutcome.FAILED, error=warning, warning=warning)


def _send(signal: Any, run: Run, **extra: object) -> None:
    signals.send(signal, Run, using=store.alias(), run=run, **extra)
