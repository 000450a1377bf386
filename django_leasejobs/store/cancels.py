"""What operators' verbs write: cancel, stop a cancelled pass, release a held run (SPEC §3, A3).

A run cancelled while its pass is in flight keeps its coalescing key until
that pass has stopped -- it frees the key itself when its next write is
refused -- or, if its worker died, until its lease expires. So no second
pass of the same (job, instance) can start beside it.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Case, F, When

from django_leasejobs.querysets import lease_in_flight
from django_leasejobs.states import FailureCode, RunStatus

from .base import alias, conflicts_retried, finished, follow_up, notify, now, runs

__all__ = [
    "cancel_run",
    "free_expired_cancel",
    "release_expired_cancels",
    "release_held",
    "stop_cancelled",
]

#: A cancelled run whose pass has stopped: its key and lease let go.
_STOPPED: dict[str, Any] = {
    "live_key": None,
    "lease_owner": None,
    "next_attempt_at": None,
    "lease_began_at": None,
}


@conflicts_retried
def cancel_run(run_id: str, note: str) -> bool:
    """Cancel a live run -- or any row holding a key, a stranded one too (§11).

    Returns ``False`` when the run had already finished.
    """
    at = now()
    in_flight = lease_in_flight(at)  # a pass may be running right now: keep its lease

    def kept(column: str) -> Case:
        return Case(When(in_flight, then=F(column)), default=None)

    return bool(
        runs()
        .cancellable()
        .filter(pk=run_id)
        .update(
            status=RunStatus.CANCELLED,
            failure_code=FailureCode.CANCELLED,
            last_error=note,
            ended_at=at,
            updated_at=at,
            # MySQL assigns left to right: the columns the test reads go last.
            live_key=kept("live_key"),
            lease_owner=kept("lease_owner"),
            next_attempt_at=kept("next_attempt_at"),
            lease_began_at=kept("lease_began_at"),
        )
    )


@conflicts_retried
def stop_cancelled(run_id: str, owner: str) -> bool:
    """Free the key of a run cancelled while *owner*'s pass was in flight, now it stopped.

    In one transaction with the follow-up a start asked for meanwhile, so the
    key is never free for a moment in between. ``False`` when the run was not
    cancelled under this pass (the pass lost its lease some other way).
    """
    with transaction.atomic(using=alias()):
        if not runs().cancelled_by(owner).filter(pk=run_id).update(**_STOPPED):
            return False
        _follow(run_id)
    return True


def free_expired_cancel(run_id: str) -> bool:
    """Free the key of cancelled *run_id* if its pass's lease has expired (its worker died).

    For a start that finds the key held: the start itself is the newest
    request, so no earlier follow-up is started.
    """
    return bool(runs().cancelled_expired(now()).filter(pk=run_id).update(**_STOPPED))


def release_expired_cancels(limit: int) -> int:
    """Free the keys of cancelled runs whose pass died with its lease, starting their follow-ups.

    Returns how many keys were freed (at most *limit*).
    """
    expired = runs().cancelled_expired(now())
    freed = 0
    for run_id, owner in expired.values_list("pk", "lease_owner")[:limit]:
        with transaction.atomic(using=alias()):
            # Only as it was read: still expired, still the lease of the pass that died.
            if expired.lease_of(owner).filter(pk=run_id).update(**_STOPPED):
                freed += 1
                _follow(run_id)
    return freed


def _follow(run_id: str) -> None:
    run = (
        runs()
        .only("job", "instance", "rerun_requested", "queue", "priority", "limit_key")
        .get(pk=run_id)
    )
    if run.rerun_requested:
        follow_up(run)


@conflicts_retried
def release_held(run_id: str, *, resume: bool, note: str) -> bool:
    """Decide a held run (L3, A4): resume it (running, due now) or fail it with *note*.

    Returns ``False`` when the run is not held (already released or finished).
    """
    at = now()
    held = runs().held().filter(pk=run_id)
    if not resume:
        return bool(held.update(last_error=note, updated_at=at, **finished(RunStatus.FAILED, at)))
    with transaction.atomic(using=alias()):
        resumed = bool(held.update(status=RunStatus.RUNNING, next_attempt_at=at, updated_at=at))
        if resumed:
            notify(alias())  # due now: wake a worker (W2)
    return resumed
