"""One run, walked along the data path: claim -> begin -> pass -> commit or settle.

The drive (:mod:`.driver`) calls :func:`drive_run` for each run it picked;
everything here goes through :mod:`.store`, which owns every write.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from django.db import DatabaseError, transaction
from django.dispatch import Signal

from . import signals, store
from .codec import encode
from .errors import connection_lost, describe
from .exceptions import Defer, NotQueueSafe, UnreadableRow
from .holder import current_holder
from .ids import new_owner
from .passes import DecodeFailed, LeaseLost, Pass, PassInterrupted, PassResult, PassTimedOut
from .states import FailureCode

if TYPE_CHECKING:
    from .models import Run
    from .registry import Job

__all__ = ["ENTRY_MARGIN", "Outcome", "drive_run"]

logger = logging.getLogger("django_leasejobs")

#: L4: the share of its lease a claim must still have to begin its pass. It is
#: also the bound on the at-least-once window: a double run needs the reply to
#: BEGIN to take longer than this share of the lease.
ENTRY_MARGIN = 0.25


@dataclass(frozen=True)
class Outcome:
    """What one pass (or one attempt to begin one) came to."""

    status: str  # advanced | completed | retrying | failed | superseded | deferred | held
    error: str = ""
    warning: str = ""


SUPERSEDED = Outcome("superseded")


def drive_run(
    run_id: str,
    spec: Job,
    *,
    took_over: bool,
    max_passes: int,
    stop: Callable[[], bool],
    interrupt: Callable[[], bool] | None = None,
) -> list[Outcome]:
    """Run up to *max_passes* passes of one run; return each pass's outcome (D3).

    An empty list means the claim was lost: another drive has the run. Each
    pass claims afresh under a new owner token and reads back what the last
    one committed.
    """
    outcomes: list[Outcome] = []
    for number in range(max_passes):
        if number and stop():
            break
        outcome = _one_pass(run_id, spec, took_over=took_over and number == 0, interrupt=interrupt)
        if outcome is None:
            break
        outcomes.append(outcome)
        if outcome.status != "advanced":
            break
    return outcomes


def _one_pass(
    run_id: str, spec: Job, *, took_over: bool, interrupt: Callable[[], bool] | None
) -> Outcome | None:
    lease = spec.effective_lease
    owner = new_owner()
    sent = time.monotonic()  # before the claim is sent: the round trip counts against us
    if not store.claim(run_id, owner, lease, current_holder(), takeover=took_over):
        return None
    unreadable: UnreadableRow | None = None
    try:
        run = store.read_claimed(run_id, owner)
    except UnreadableRow as exc:
        unreadable, run = exc, exc.run
    if run is None:
        return None
    if took_over:
        # The claim charged the interrupted pass one attempt (L3).
        if not spec.safe_to_repeat:
            return _hold(run, owner)
        if spec.retry.exhausted(run.attempts):
            return _settle(
                run,
                spec,
                owner,
                code=FailureCode.LEASE_EXPIRED,
                error=store.TAKEOVER_NOTE,
                retry_in=None,
            )
    margin = lease * ENTRY_MARGIN
    if lease - timedelta(seconds=time.monotonic() - sent) <= margin or not store.begin(
        run_id, owner, margin
    ):
        return _admission_miss(run, spec, owner, sent, margin)
    # BEGIN wrote: the pass is committed to running (L4), whatever happens next.
    if unreadable is not None:
        # Reading the row is part of the pass: a row the database cannot hand
        # back fails like one whose JSON does not parse (R9, §12).
        return _settle_failure(
            run, spec, owner, FailureCode.DECODE_FAILED, f"UnreadableRow: {unreadable.reason}"
        )
    return _run_pass(run, spec, owner, sent, interrupt)


def _run_pass(
    run: Run, spec: Job, owner: str, sent: float, interrupt: Callable[[], bool] | None
) -> Outcome:
    p = Pass(run, spec, owner, sent, interrupt)
    try:
        p.load()
        result = spec.handler(p)
    except LeaseLost:
        return _superseded(run, owner)
    except PassInterrupted:
        # Shutting down: hand the run back at this step boundary, uncharged.
        if p.lost or not store.defer(run, owner, timedelta(0)):
            return _superseded(run, owner)
        return Outcome("deferred", warning="released at a step boundary: the worker is stopping")
    except Defer as deferral:
        if p.lost:
            return _superseded(run, owner)
        if store.defer(run, owner, deferral.delay):
            return Outcome("deferred")
        return _superseded(run, owner)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit from a handler is a failed pass too (§11)
        return _failed(run, spec, p, owner, exc)

    # The pass's own record decides, not whether an exception reached us.
    if p.lost:
        return _superseded(run, owner)
    if p.timed_out or p.step_failure is not None or p.past_timeout():
        return _failed(run, spec, p, owner, None)
    if result is not None and not isinstance(result, PassResult):
        error = TypeError(
            f"the handler returned {type(result).__name__}; return p.advance(cursor), "
            "p.done() or None"
        )
        return _failed(run, spec, p, owner, error)
    try:
        cursor = run.cursor
        if result is not None and result.has_cursor:
            cursor = encode(result.cursor, "cursor")
        counters = encode(dict(p.counters), "counters")
    except NotQueueSafe as exc:
        return _failed(run, spec, p, owner, exc)

    done = result is not None and result.done
    try:
        committed = store.commit(
            run,
            owner,
            cursor=cursor,
            counters=counters,
            done=done,
            progress_total=p.progress_total,
            drop_steps=p.recorded_steps or run.has_steps,
        )
    except DatabaseError as exc:
        if connection_lost(store.alias()):
            raise
        # The database refused a value the checks let through: the pass
        # failed, with the database's reason, rather than leaving it begun.
        return _settle_failure(
            run,
            spec,
            owner,
            FailureCode.HANDLER_FAILED,
            describe(exc, prefix="the pass's outcome could not be stored: "),
        )
    if not committed:
        return _superseded(run, owner)
    if not done:
        return Outcome("advanced")
    logger.info("Run completed id=%s job=%s", run.pk, run.job)
    _scheduled_outcome(run, spec, "done")
    _send(signals.run_completed, run)
    return Outcome("completed")


def _superseded(run: Run, owner: str) -> Outcome:
    """The pass lost its run. If an operator cancelled it, the key is freed now (§3 cancel)."""
    store.stop_cancelled(run.pk, owner)
    return SUPERSEDED


def _settle_failure(run: Run, spec: Job, owner: str, code: str, error: str) -> Outcome:
    """Settle a failed pass that no step or timeout judged: by the job's own policy."""
    attempts = run.attempts + 1
    exhausted = spec.retry.exhausted(attempts)
    retry_in = None if exhausted else spec.retry.delay(attempts)
    return _settle(run, spec, owner, code=code, error=error, retry_in=retry_in, attempts=attempts)


def _failed(run: Run, spec: Job, p: Pass, owner: str, exc: BaseException | None) -> Outcome:
    """Settle a pass that failed (R4): classify it, charge it, back off or give up."""
    if p.lost:
        return SUPERSEDED
    failure = p.step_failure
    if p.timed_out or p.past_timeout() or isinstance(exc, PassTimedOut):
        code, error = FailureCode.TIMEOUT, f"PassTimedOut: the pass ran past {spec.timeout}"
        failure = None  # A timeout is judged by the job's policy, whatever step was running.
    elif failure is not None:
        code, error = FailureCode.HANDLER_FAILED, failure.error
    elif isinstance(exc, DecodeFailed):
        code, error = FailureCode.DECODE_FAILED, describe(exc)
    else:
        code, error = FailureCode.HANDLER_FAILED, describe(exc or RuntimeError("pass failed"))
    attempts = run.attempts + 1
    # The run's attempts count consecutive failed passes; a step's own count
    # and policy decide exhaustion and backoff when a step failed (R7).
    policy, against = (failure.policy, failure.attempts) if failure else (spec.retry, attempts)
    exhausted = policy.exhausted(against)
    if exhausted and failure is not None:
        code = FailureCode.STEP_EXHAUSTED
    retry_in = None if exhausted else policy.delay(against)
    return _settle(run, spec, owner, code=code, error=error, retry_in=retry_in, attempts=attempts)


def _settle(
    run: Run,
    spec: Job,
    owner: str,
    *,
    code: str,
    error: str,
    retry_in: timedelta | None,
    attempts: int | None = None,
) -> Outcome:
    charged = run.attempts if attempts is None else attempts
    if not store.settle(
        run, owner, attempts=charged, failure_code=code, error=error, retry_in=retry_in
    ):
        return _superseded(run, owner)
    if retry_in is not None:
        logger.warning(
            "Run retrying id=%s job=%s attempt=%s code=%s in=%s",
            run.pk,
            run.job,
            charged,
            code,
            retry_in,
        )
        return Outcome("retrying", error=error)
    logger.error("Run failed id=%s job=%s attempts=%s code=%s", run.pk, run.job, charged, code)
    _scheduled_outcome(run, spec, "failed")
    _send(signals.run_failed, run, failure_code=code, error=error)
    return Outcome("failed", error=error)


def _hold(run: Run, owner: str) -> Outcome:
    if not store.hold(run, owner):
        return _superseded(run, owner)
    logger.error("Run held id=%s job=%s code=interrupted", run.pk, run.job)
    _send(signals.run_held, run)
    return Outcome("held", error=store.TAKEOVER_NOTE)


def _admission_miss(run: Run, spec: Job, owner: str, sent: float, margin: timedelta) -> Outcome:
    """L5: the claim could not begin in time; nothing ran, nothing is charged."""
    waited = timedelta(seconds=time.monotonic() - sent)

    def note(misses: int) -> str:
        return (
            f"job {spec.name!r}: claim not begun in time (lease {spec.effective_lease}, "
            f"margin {margin}, claim to begin took {waited}); admission miss {misses} "
            f"of {store.ADMISSION_MISS_MAX}"
        )

    missed = store.miss(run.pk, owner, note((run.admission_misses or 0) + 1))
    if missed is None:
        return SUPERSEDED
    warning = note(missed.misses)
    logger.warning("Admission miss id=%s %s", run.pk, warning)
    if missed.failed:
        _send(
            signals.run_failed,
            run,
            failure_code=FailureCode.LEASE_TOO_SHORT,
            error=warning,
        )
        return Outcome("failed", error=warning, warning=warning)
    return Outcome("superseded", warning=warning)


def _scheduled_outcome(run: Run, spec: Job, status: str) -> None:
    """A scheduled job's final outcome is what its schedule shows (S6)."""
    if spec.schedule:
        from .schedules import record_outcome  # Schedules import the store; avoid a cycle.

        record_outcome(run, status)


def _send(signal: Signal, run: Run, **extra: object) -> None:
    """Send *signal* with the run as stored, once the transaction (if any) commits."""
    if not signal.has_listeners():
        return  # No receivers: skip the re-read.

    def fire() -> None:
        # An unreadable row (R9): the receivers get what the pass knew of it.
        with contextlib.suppress(DatabaseError, ValueError, TypeError, OverflowError):
            run.refresh_from_db()
        signals.send_robust(signal, type(run), run=run, **extra)

    transaction.on_commit(fire)
