"""A begun pass's writes, each fenced on its owner token (SPEC L6-L8, R3-R5, R8, L3).

Every verb here returns ``False``, writing nothing, when *owner* no longer
holds the run: the lease expired and another worker took it over, or an
operator cancelled it. The caller then reports the pass ``superseded``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction

from django_leasejobs.clock import plus
from django_leasejobs.models import Run, Step
from django_leasejobs.states import FailureCode, RunStatus

from .base import alias, conflicts_retried, finished, follow_up, now, runs

__all__ = ["commit", "defer", "hold", "record_step", "renew", "settle"]


def _released(at: Any) -> dict[str, Any]:
    """L8: an outcome lets go of the lease (and ``next_attempt_at`` says when next)."""
    return {"lease_owner": None, "lease_began_at": None, "updated_at": at}


@conflicts_retried
def renew(run_id: str, owner: str, lease: timedelta) -> bool:
    """Extend *owner*'s lease to now + *lease* (L7)."""
    at = now()
    return bool(
        runs()
        .held_by(owner)
        .filter(pk=run_id)
        .update(next_attempt_at=plus(at, lease), updated_at=at)
    )


@conflicts_retried
def record_step(
    run_id: str,
    owner: str,
    lease: timedelta,
    name: str,
    *,
    result: str | None,
    attempts: int,
    error: str,
    exists: bool,
) -> bool:
    """Renew the lease and record one step attempt, in one transaction (R5, L7).

    ``result`` is the step's JSON text, or ``None`` for a failed attempt.
    *exists* says whether the ledger already has a row for *name* (the pass
    read the ledger once), so this is an UPDATE or an INSERT, never both.
    """
    at = now()
    try:
        with transaction.atomic(using=alias()):
            renewed = (
                runs()
                .held_by(owner)
                .filter(pk=run_id)
                .update(next_attempt_at=plus(at, lease), updated_at=at, has_steps=True)
            )
            if not renewed:
                return False
            steps = Step.objects.using(alias())
            values = {"result": result, "attempts": attempts, "last_error": error}
            if exists:
                steps.filter(run_id=run_id, name=name).update(recorded_at=at, **values)
            else:
                steps.create(run_id=run_id, name=name, recorded_at=at, **values)
    except IntegrityError:
        # Another pass wrote this step's row, so it held the run after us.
        return False
    return True


@conflicts_retried
def commit(
    run: Run,
    owner: str,
    *,
    cursor: str | None,
    counters: str,
    done: bool,
    progress_total: int | None,
    drop_steps: bool,
) -> bool:
    """Commit a pass that returned (R3), in one transaction.

    Writes the cursor (the caller passes the old one when the handler supplied
    none), the merged counters, ``attempts = 0``, a cleared failure and a
    released lease due now (L8), and drops the pass's step ledger. Done: status
    ``done``, ``ended_at`` stamped, ``live_key`` cleared -- and if a kick asked
    for it (``rerun_requested``), the follow-up run starts in the same
    transaction, so the key is never free for a moment in between.
    """
    at = now()
    values: dict[str, Any] = {
        "cursor": cursor,
        "counters": counters,
        "attempts": 0,
        "failure_code": "",
        "last_error": "",
        **_released(at),
    }
    if progress_total is not None:
        values["progress_total"] = progress_total
    values |= finished(RunStatus.DONE, at) if done else {"next_attempt_at": at}
    if drop_steps:
        values["has_steps"] = False
    held = runs().held_by(owner).filter(pk=run.pk)
    # A finish first tries the form no kick asked to follow up; most finishes
    # are that, and then nothing needs to be read back.
    quiet = held.filter(rerun_requested=False) if done else held
    if not drop_steps and quiet.update(**values):
        return True  # One statement, so no transaction: an advance, or a quiet finish.
    # Writes that must land together: the ledger goes with the commit, and a
    # kicked finish starts its follow-up before anyone else can take the key.
    with transaction.atomic(using=alias()):
        won = drop_steps and bool(quiet.update(**values))
        kicked = False
        if not won and done:
            won = kicked = bool(held.update(**values))
        if won and drop_steps:
            Step.objects.using(alias()).filter(run_id=run.pk).delete()
        if kicked:
            follow_up(run)
    return bool(won)


@conflicts_retried
def settle(
    run: Run,
    owner: str,
    *,
    attempts: int,
    failure_code: FailureCode,
    error: str,
    retry_in: timedelta | None,
) -> bool:
    """Record a failed pass (R4): nothing the handler produced is written.

    Cursor, counters and the step ledger stay as the last commit left them.
    With *retry_in* the run is due again after that backoff; without it the
    run is ``failed`` for good. Either way the lease is released (L8).
    """
    at = now()
    values: dict[str, Any] = {
        "attempts": attempts,
        "failure_code": failure_code,
        "last_error": error,
        **_released(at),
    }
    if retry_in is None:
        values |= finished(RunStatus.FAILED, at)
    else:
        values["next_attempt_at"] = plus(at, retry_in)
    return bool(runs().held_by(owner).filter(pk=run.pk).update(**values))


@conflicts_retried
def defer(run: Run, owner: str, delay: timedelta) -> bool:
    """Put the run off by *delay* without charging an attempt (R8).

    Attempts and the failure stay as they were.
    """
    at = now()
    return bool(
        runs()
        .held_by(owner)
        .filter(pk=run.pk)
        .update(next_attempt_at=plus(at, delay), **_released(at))
    )


@conflicts_retried
def hold(run: Run, owner: str) -> bool:
    """Hold a run whose interrupted pass must not be replayed (L3).

    Status ``held`` with failure ``interrupted``; it keeps its live key (a
    held run is live, R1) and waits for an operator's ``release``.
    """
    at = now()
    return bool(
        runs()
        .held_by(owner)
        .filter(pk=run.pk)
        .update(
            status=RunStatus.HELD,
            failure_code=FailureCode.INTERRUPTED,
            next_attempt_at=None,
            **_released(at),
        )
    )
