"""The end of a pass: its verdict, then its handler's ending, as ONE store verb (R3-R10, L6).

A pass ends with a verdict (what decided it: its lease, its timeout, a step,
a shutdown -- :class:`~.passes.Verdict`) and an ending (what its handler
returned or raised). :func:`conclude` maps the two to exactly one of
``commit``, ``settle``, ``defer`` or ``hold`` -- or none, when the lease is
gone. A finish may carry the next run's BEGIN in its own statement
(``commit_and_begin``, :mod:`.follower`), and an advance the claim and
BEGIN of the same run's next pass (``commit_and_go_on``, :mod:`.going_on`);
either is still this pass's one verb.
Every function here takes the pass's :class:`~.leases.Lease` whole and
returns its :class:`~.outcome.Outcome`.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from django.db import DatabaseError

from . import signals, store
from .codec import encode
from .errors import connection_lost, describe
from .exceptions import DecodeFailed, Defer, NotQueueSafe, StepFailed
from .holder import current_holder
from .ids import new_owner
from .leases import TAKEOVER_NOTE, Claimed, Countdown, Lease
from .models import Run
from .outcome import SUPERSEDED, Outcome
from .passes import IDLE_PASSES_WARN, IDLE_WARNING, PassResult
from .policy import Retry
from .schedules.writes import record_outcome
from .states import FailureCode, PassOutcome, RunStatus
from .times import duration
from .verdicts import Verdict

if TYPE_CHECKING:
    from .follower import Follower
    from .going_on import GoingOn

__all__ = ["Ending", "conclude", "fail", "hold", "send", "settle", "superseded"]

logger = logging.getLogger("django_leasejobs")


class Ending(NamedTuple):
    """How the handler's call ended: what it returned, or what it raised."""

    result: object = None
    error: BaseException | None = None


def conclude(
    lease: Lease,
    ending: Ending,
    follower: Follower | None = None,
    going_on: GoingOn | None = None,
) -> Outcome:
    """What decided the pass, else how its handler ended, as one store verb (R3-R10, L6).

    A finish carries the BEGIN of *follower*, the drive's next run claimed
    ahead, where it can (:mod:`.follower`); an advance claims and begins the
    run's next pass where the drive may *go on* with it (:mod:`.going_on`).
    """
    verdict = lease.record.conclude()
    if verdict is Verdict.LOST:
        return superseded(lease)
    if verdict is Verdict.INTERRUPTED:
        # Shutting down: hand the run back at this step boundary, uncharged.
        if not store.defer(lease.run, lease.owner, timedelta(0)):
            return superseded(lease)
        warning = "released at a step boundary: the worker is stopping"
        return Outcome(PassOutcome.DEFERRED, warning=warning)
    if verdict is Verdict.TIMED_OUT:
        error = f"PassTimedOut: the pass ran past {lease.spec.timeout}"
        return fail(lease, FailureCode.TIMEOUT, error)
    if verdict is Verdict.STEP_FAILED:
        assert lease.record.failed_step is not None
        return _fail_step(lease, lease.record.failed_step)
    # Nothing decided the pass: its handler's ending does.
    if isinstance(ending.error, Defer):
        if not store.defer(lease.run, lease.owner, ending.error.delay):
            return superseded(lease)
        return Outcome(PassOutcome.DEFERRED)
    if isinstance(ending.error, DecodeFailed):
        return fail(lease, FailureCode.DECODE_FAILED, describe(ending.error))
    if ending.error is not None:
        return fail(lease, FailureCode.HANDLER_FAILED, describe(ending.error))
    return _commit(lease, ending.result, follower, going_on)


def _commit(
    lease: Lease, result: object, follower: Follower | None, going_on: GoingOn | None
) -> Outcome:
    """R3: commit what the handler returned, once it is known to be storable."""
    run, record = lease.run, lease.record
    if result is not None and not isinstance(result, PassResult):
        problem = TypeError(
            f"the handler returned {type(result).__name__}; return p.advance(cursor), "
            "p.done() or None"
        )
        return fail(lease, FailureCode.HANDLER_FAILED, describe(problem))
    try:
        cursor = run.cursor
        if result is not None and result.has_cursor:
            cursor = encode(result.cursor, "cursor")
        counters = encode(record.counters, "counters")
        returned = None if result is None else result.result
        stored = None if returned is None else encode(returned, "result")
    except NotQueueSafe as exc:
        return fail(lease, FailureCode.HANDLER_FAILED, describe(exc))
    done = result is not None and result.done
    written: dict[str, Any] = {"cursor": cursor, "counters": counters}
    if stored is not None:
        written["result"] = stored
    # R3 keeps the cursor of a pass that returned None; a handler that forgot to
    # return would then run again and again, changing nothing: count it (visible).
    idle = not done and cursor == run.cursor and not record.steps_recorded
    idle_passes = run.idle_passes + 1 if idle else 0
    changed = None if idle_passes == run.idle_passes else idle_passes
    drop_steps = record.steps_recorded or run.has_steps
    # A finish that drops no step ledger is one statement, which can carry the BEGIN
    # of the next run claimed ahead (§13). Taken only now, so that a drive told to
    # stop while this pass ran begins nothing more.
    carried = (
        follower.claim_to_carry() if follower is not None and done and not drop_steps else None
    )
    try:
        if follower is not None and carried is not None:
            committed = _commit_and_begin(lease, follower, carried, changed, written)
        elif going_on is not None and not done and going_on.may():
            committed = _commit_and_go_on(lease, going_on, changed, written, drop_steps)
        else:
            committed = store.commit(
                run,
                lease.owner,
                done=done,
                progress_total=record.progress_total,
                drop_steps=drop_steps,
                idle_passes=changed,
                **written,
            )
    except DatabaseError as exc:
        if connection_lost(store.alias()):
            raise
        # The database refused a value the checks let through: the pass
        # failed, with the database's reason, rather than leaving it begun.
        error = describe(exc, prefix="the pass's outcome could not be stored: ")
        return fail(lease, FailureCode.HANDLER_FAILED, error)
    if not committed:
        return superseded(lease)
    if not done:
        return Outcome(PassOutcome.ADVANCED, warning=_idle_warning(run, idle_passes))
    if lease.spec.schedule:
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
    send(signals.run_completed, finished)
    return Outcome(PassOutcome.COMPLETED)


def _commit_and_begin(
    lease: Lease,
    follower: Follower,
    carried: Claimed,
    idle_passes: int | None,
    written: dict[str, Any],
) -> bool:
    """R3's finish with the next pass's BEGIN carried in it (L4, §13); whether the finish won."""
    then = store.NextBegin(follower.run_id, carried.owner, carried.countdown.margin)
    progress_total = lease.record.progress_total
    try:
        committed, began = store.commit_and_begin(
            lease.run,
            lease.owner,
            then,
            progress_total=progress_total,
            idle_passes=idle_passes,
            **written,
        )
    except DatabaseError:
        if connection_lost(store.alias()):
            raise  # whether the next pass began is not known: its claim is left to its lease
        # Nothing of the pair was written. The next run begins alone in its turn, and
        # the finish is sent alone: if the database refuses it again, that is this pass's.
        follower.sent(None)
        return store.commit(
            lease.run,
            lease.owner,
            done=True,
            progress_total=progress_total,
            drop_steps=False,
            idle_passes=idle_passes,
            **written,
        )
    follower.sent(began)
    return committed


def _commit_and_go_on(
    lease: Lease,
    going_on: GoingOn,
    idle_passes: int | None,
    written: dict[str, Any],
    drop_steps: bool,
) -> bool:
    """R3's advance with the run's next pass claimed and begun in it (L2, L4); whether it won."""
    owner = new_owner()
    # Counted from before the statement is sent, as a claim's: the round trip counts (L1).
    countdown = Countdown(lease.countdown.lease, Countdown.now())
    then = store.NextPass(owner, current_holder(), countdown.lease)
    progress_total = lease.record.progress_total
    claimed = store.commit_and_go_on(
        lease.run,
        lease.owner,
        then,
        progress_total=progress_total,
        drop_steps=drop_steps,
        idle_passes=idle_passes,
        **written,
    )
    if claimed is not None:
        going_on.claimed = Claimed(claimed, owner, countdown, begun=True)
        return True
    # Nothing written: the lease is gone, or the queue was paused meanwhile (W6). The
    # advance alone tells which; the drive's next claim then finds the queue paused.
    return store.commit(
        lease.run,
        lease.owner,
        done=False,
        progress_total=progress_total,
        drop_steps=drop_steps,
        idle_passes=idle_passes,
        **written,
    )


def _idle_warning(run: Run, idle_passes: int) -> str:
    """Once, at the :data:`IDLE_PASSES_WARN`-th pass in a row that changed nothing: say so."""
    if idle_passes != IDLE_PASSES_WARN:
        return ""
    warning = IDLE_WARNING.format(passes=idle_passes)
    logger.warning("Run id=%s job=%s %s", run.pk, run.job, warning)
    return warning


def fail(lease: Lease, code: FailureCode, error: str) -> Outcome:
    """R4: a failed pass, charged one attempt and judged by the job's retry policy."""
    attempts = lease.run.attempts + 1
    retry = lease.spec.retry
    return settle(lease, code, error, attempts, None if retry.exhausted(attempts) else retry)


def _fail_step(lease: Lease, failure: StepFailed) -> Outcome:
    """R7: a failed step is judged by its own count and policy; the run still counts the pass."""
    exhausted = failure.policy.exhausted(failure.attempts)
    code = FailureCode.STEP_EXHAUSTED if exhausted else FailureCode.HANDLER_FAILED
    retry_in = None if exhausted else failure.policy.delay(failure.attempts)
    return _settled(lease, code, failure.error, lease.run.attempts + 1, retry_in)


def settle(
    lease: Lease, code: FailureCode, error: str, attempts: int, retry: Retry | None
) -> Outcome:
    """R4: write a failed pass: retried after *retry*'s back-off, or failed for good."""
    retry_in = None if retry is None else retry.delay(attempts)
    return _settled(lease, code, error, attempts, retry_in)


def _settled(
    lease: Lease, code: FailureCode, error: str, attempts: int, retry_in: timedelta | None
) -> Outcome:
    run = lease.run
    if not store.settle(
        run, lease.owner, attempts=attempts, failure_code=code, error=error, retry_in=retry_in
    ):
        return superseded(lease)
    if retry_in is not None:
        logger.warning(
            "Run retrying id=%s job=%s attempt=%s code=%s in=%s",
            run.pk,
            run.job,
            attempts,
            code,
            duration(retry_in),
        )
        return Outcome(PassOutcome.RETRYING, error=error)
    if lease.spec.schedule:
        record_outcome(run, RunStatus.FAILED)
    failed = run.as_written(
        status=RunStatus.FAILED, attempts=attempts, failure_code=code, last_error=error
    )
    send(signals.run_failed, failed, failure_code=code, error=error)
    return Outcome(PassOutcome.FAILED, error=error)


def hold(lease: Lease) -> Outcome:
    """L3: a pass of a job not safe to repeat was interrupted; the run waits for an operator."""
    if not store.hold(lease.run, lease.owner):
        return superseded(lease)
    held = lease.run.as_written(status=RunStatus.HELD, failure_code=FailureCode.INTERRUPTED)
    send(signals.run_held, held)
    return Outcome(PassOutcome.HELD, error=TAKEOVER_NOTE)


def superseded(lease: Lease) -> Outcome:
    """The pass lost its run. If an operator cancelled it, the key is freed now (§3 cancel)."""
    store.stop_cancelled(lease.run.pk, lease.owner)
    return SUPERSEDED


def send(signal: Any, run: Run, **extra: object) -> None:
    """Send *signal* for *run* once its outcome has committed."""
    signals.send(signal, Run, using=store.alias(), run=run, **extra)
