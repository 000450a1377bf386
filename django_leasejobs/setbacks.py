"""A pass that ends without committing its work: failed, held or superseded (SPEC R4, R7, L3).

The pass-level side of :mod:`.store.setbacks`: :func:`fail` charges an
attempt and judges it by the job's retry policy, :func:`settle` writes that
judgement, :func:`hold` parks a run not safe to repeat for an operator, and
:func:`superseded` is the ending of a pass whose lease is gone -- it writes
nothing of its own. Each takes the pass's :class:`~.leases.Lease` whole and
returns its :class:`~.outcome.Outcome`; :func:`send` sends a run's signal
once its outcome has committed, and :func:`ended` tells a run's end to its
schedule, then sends its signal.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from . import signals, store
from .exceptions import StepFailed
from .leases import TAKEOVER_NOTE, Lease
from .models import Run
from .outcome import SUPERSEDED, Outcome
from .policy import Retry
from .schedules.writes import record_outcome
from .states import FailureCode, PassOutcome, RunStatus
from .times import duration

__all__ = ["ended", "fail", "fail_step", "hold", "send", "settle", "superseded"]

logger = logging.getLogger("django_leasejobs")


def fail(lease: Lease, code: FailureCode, error: str) -> Outcome:
    """R4: a failed pass, charged one attempt and judged by the job's retry policy."""
    attempts = lease.run.attempts + 1
    retry = lease.spec.retry
    return settle(lease, code, error, attempts, None if retry.exhausted(attempts) else retry)


def fail_step(lease: Lease, failure: StepFailed) -> Outcome:
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
    if retry_in is None:
        failed = run.as_written(
            status=RunStatus.FAILED, attempts=attempts, failure_code=code, last_error=error
        )
        ended(lease, failed, signals.run_failed, failure_code=code, error=error)
        return Outcome(PassOutcome.FAILED, error=error)
    logger.warning(
        "Run retrying id=%s job=%s attempt=%s code=%s in=%s",
        run.pk,
        run.job,
        attempts,
        code,
        duration(retry_in),
    )
    return Outcome(PassOutcome.RETRYING, error=error)


def ended(lease: Lease, run: Run, signal: Any, **extra: object) -> None:
    """*run* ended for good, committed: its schedule's last outcome first (S6), then its signal."""
    if lease.spec.schedule:
        record_outcome(run, RunStatus(run.status))
    send(signal, run, **extra)


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
