"""A begun pass's writes, each fenced on its owner token (SPEC L6-L8, R3-R5, R8, L3).

Every verb here returns ``False``, writing nothing, when *owner* no longer
holds the run: the lease expired and another worker took it over, or an
operator cancelled it. The caller then reports the pass ``superseded``.

The statements a pass sends every time -- a renewal, a commit, a settle -- are
:class:`~.sql.Statement` s: compiled once, bound per call.
"""

from __future__ import annotations

from datetime import timedelta
from functools import cache
from typing import Any, NamedTuple

from django.db import IntegrityError, connections, transaction
from django.db.models import DurationField

from django_leasejobs.clock import plus
from django_leasejobs.models import Run, Step
from django_leasejobs.querysets import RunQuerySet
from django_leasejobs.states import FailureCode, RunStatus

from .base import alias, conflicts_retried, finished, follow_up, held, now
from .claims import BEGIN
from .sql import AS_IS, KEY, Carried, Paired, Slots, Statement
from .unanswered import Unanswered, unanswered_if_lost

__all__ = [
    "NextBegin",
    "commit",
    "commit_and_begin",
    "defer",
    "hold",
    "record_step",
    "renew",
    "settle",
]

_HELD = {"run_id": KEY, "owner": KEY}


def _released(at: Any) -> dict[str, Any]:
    """L8: an outcome lets go of the lease (and ``next_attempt_at`` says when next)."""
    return {"lease_owner": None, "lease_began_at": None, "updated_at": at}


# functools.cache is thread-safe; a race builds one statement twice, to equal values.
@cache
def _renewal(*, with_step: bool, strict: bool = False) -> Statement:
    """L7: the lease renewed to now + lease -- with a step's record, or alone (``check()``).

    *strict* (a pass holding a concurrency slot, C2): only while the lease is
    unexpired too, so a lease that ran out -- its slot free for another pass
    -- is never revived.
    """

    def build(runs: RunQuerySet, s: Slots) -> tuple[RunQuerySet, dict[str, Any]]:
        values = {"next_attempt_at": plus(s.now, s.lease), "updated_at": s.now}
        fenced = held(s.run_id, s.owner, runs)
        fenced = fenced.lease_ends_after(s.now) if strict else fenced
        return fenced, values | ({"has_steps": True} if with_step else {})

    return Statement({**_HELD, "lease": DurationField()}, build)


@conflicts_retried
def renew(run_id: str, owner: str, lease: timedelta, *, strict: bool = False) -> bool:
    """Extend *owner*'s lease to now + *lease* (L7)."""
    renewal = _renewal(with_step=False, strict=strict)
    return bool(renewal.run(alias(), run_id=run_id, owner=owner, lease=lease))


# functools.cache is thread-safe; a race builds one statement twice, to equal values.
@cache
def _step(*, strict: bool, began: bool | None = None) -> Carried:
    """R5 + L7 on PostgreSQL: a step's record carried by its renewal, one statement.

    *began* is :class:`~.sql.Carried`'s: A8's mark of a step in flight, set or cleared.
    """
    return Carried(
        _renewal(with_step=True, strict=strict),
        {**_HELD, "lease": DurationField(), "name": KEY, "result": AS_IS, "attempts": AS_IS}
        | {"error": AS_IS},
        began=began,
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
    strict: bool = False,
    began: bool | None = None,
) -> bool:
    """Renew the lease and record one step attempt, in one transaction (R5, L7).

    ``result`` is the step's JSON text, or ``None`` for a failed attempt.
    *exists* says whether the ledger already has a row for *name* (the pass
    read the ledger once), so this is an UPDATE or an INSERT, never both.

    *began* is for a job not safe to repeat only (A8): ``True`` records the
    step as begun before its function runs -- ``result`` ``None`` and
    *attempts* and *error* as they were, so that a held run can name the
    step that may have half-happened -- and ``False`` clears that mark with
    the attempt's record. ``None``, for every other job, writes the record
    alone, as ever (§13).
    """
    using = alias()
    if connections[using].vendor == "postgresql":
        # One statement: the record rides in the renewal's CTE (see Carried).
        values = {"run_id": run_id, "owner": owner, "lease": lease, "name": name}
        values |= {"result": result, "attempts": attempts, "error": error}
        try:
            return _step(strict=strict, began=began).run(using, exists=exists, **values)
        except IntegrityError:
            return False  # as below
    try:
        with transaction.atomic(using=using):
            renewal = _renewal(with_step=True, strict=strict)
            if not renewal.run(using, run_id=run_id, owner=owner, lease=lease):
                return False
            steps = Step.objects.using(using)
            values = {"result": result, "attempts": attempts, "last_error": error}
            at = now()
            if began is not None:
                values["began_at"] = at if began else None
            if exists:
                steps.filter(run_id=run_id, name=name).update(recorded_at=at, **values)
            else:
                steps.create(run_id=run_id, name=name, recorded_at=at, **values)
    except IntegrityError:
        # Another pass wrote this step's row, so it held the run after us.
        return False
    return True


# functools.cache is thread-safe; a race builds one statement twice, to equal values.
@cache
def _commit(
    *,
    done: bool,
    quiet: bool,
    total: bool,
    drop_steps: bool,
    no_cursor: bool,
    result: bool,
    idle: bool = False,
) -> Statement:
    """R3's one UPDATE, in each of its shapes (a finish, a kicked finish, an advance, ...)."""

    def build(runs: RunQuerySet, s: Slots) -> tuple[RunQuerySet, dict[str, Any]]:
        values: dict[str, Any] = {
            "cursor": None if no_cursor else s.cursor,
            "counters": s.counters,
            "attempts": 0,
            "failure_code": "",
            "last_error": "",
            **_released(s.now),
        }
        if total:
            values["progress_total"] = s.total
        values |= finished(RunStatus.DONE, s.now) if done else {"next_attempt_at": s.now}
        if result:
            values["result"] = s.result
        if drop_steps:
            values["has_steps"] = False
        if idle:
            values["idle_passes"] = s.idle_passes
        fenced = held(s.run_id, s.owner, runs)
        return (fenced.filter(rerun_requested=False) if quiet else fenced), values

    fields = {"cursor": AS_IS, "counters": AS_IS, "total": AS_IS, "result": AS_IS}
    return Statement({**_HELD, **fields, "idle_passes": AS_IS}, build)


class NextBegin(NamedTuple):
    """The next pass's BEGIN (L4), carried in this pass's commit: whose run, whose claim."""

    run_id: str
    owner: str
    margin: timedelta


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
    result: str | None = None,
    idle_passes: int | None = None,
) -> bool:
    """Commit a pass that returned (R3), in one transaction.

    Writes the cursor (the caller passes the old one when the handler supplied
    none), the merged counters, ``attempts = 0``, a cleared failure and a
    released lease due now (L8), and drops the pass's step ledger. Done: status
    ``done``, ``ended_at`` stamped, ``live_key`` cleared -- and if a kick asked
    for it (``rerun_requested``), the follow-up run starts in the same
    transaction, so the key is never free for a moment in between. A finish
    with a *result* (already encoded) stores it in the run's ``result``.
    *idle_passes*, when given, is the run's new count of passes in a row that
    changed nothing (:data:`~django_leasejobs.passes.IDLE_PASSES_WARN`); the
    lease makes the count read at the claim the row's own.
    """
    using = alias()
    shape, values = _committed(
        run,
        owner,
        cursor=cursor,
        counters=counters,
        done=done,
        progress_total=progress_total,
        drop_steps=drop_steps,
        result=result,
        idle_passes=idle_passes,
    )
    # A finish first tries the form no kick asked to follow up; most finishes
    # are that, and then nothing needs to be read back.
    if not drop_steps and _commit(quiet=done, **shape).run(using, **values):
        return True  # One statement, so no transaction: an advance, or a quiet finish.
    return _landed(run, shape, values, drop_steps=drop_steps, tried=not drop_steps)


@conflicts_retried
def commit_and_begin(
    run: Run,
    owner: str,
    then: NextBegin,
    *,
    cursor: str | None,
    counters: str,
    progress_total: int | None,
    result: str | None = None,
    idle_passes: int | None = None,
) -> tuple[bool, bool]:
    """Finish a pass (R3) and BEGIN the next run's claimed pass (L4) in one commit (§13).

    The finish is :func:`commit`'s with ``done=True`` and a pass that
    recorded no step; *then* is the next pass's BEGIN, exactly as
    :func:`~.claims.begin` sends it. Each is its own compare-and-set on its
    own run: one can win while the other loses. On PostgreSQL the two are one
    statement (:class:`~.sql.Paired`); elsewhere, one transaction.

    Returns
    -------
    tuple[bool, bool]
        Whether the commit won (``False``: the lease was gone, nothing
        written), and whether the BEGIN wrote (``False``: the next claim is
        no longer held with more than ``then.margin`` left; its pass must
        not begin). A connection lost on the way may have applied either:
        the BEGIN is noted, to be given back (F3); the finish is the pass's
        error, never retried (it may have applied).
    """
    with unanswered_if_lost(Unanswered(then.run_id, then.owner)):
        return _commit_and_begin(
            run,
            owner,
            then,
            cursor=cursor,
            counters=counters,
            progress_total=progress_total,
            result=result,
            idle_passes=idle_passes,
        )


def _commit_and_begin(
    run: Run,
    owner: str,
    then: NextBegin,
    *,
    cursor: str | None,
    counters: str,
    progress_total: int | None,
    result: str | None,
    idle_passes: int | None,
) -> tuple[bool, bool]:
    using = alias()
    shape, values = _committed(
        run,
        owner,
        cursor=cursor,
        counters=counters,
        done=True,
        progress_total=progress_total,
        drop_steps=False,
        result=result,
        idle_passes=idle_passes,
    )
    values |= {"next_run_id": then.run_id, "next_owner": then.owner, "next_margin": then.margin}
    if connections[using].vendor == "postgresql":
        won, began = _paired(**shape).run(using, **values)
    else:
        with transaction.atomic(using=using):
            won = _commit(quiet=True, **shape).run(using, **values)
            began = BEGIN.run(using, run_id=then.run_id, owner=then.owner, margin=then.margin)
    if not won:  # a kick asked to follow this finish up: its own transaction
        won = _landed(run, shape, values, drop_steps=False, tried=True)
    return bool(won), bool(began)


def _committed(
    run: Run,
    owner: str,
    *,
    cursor: str | None,
    counters: str,
    done: bool,
    progress_total: int | None,
    drop_steps: bool,
    result: str | None,
    idle_passes: int | None,
) -> tuple[dict[str, bool], dict[str, Any]]:
    """A commit's shape (which compiled form) and its values."""
    values: dict[str, Any] = {"run_id": run.pk, "owner": owner, "cursor": cursor}
    values |= {"counters": counters, "total": progress_total, "result": result}
    values["idle_passes"] = idle_passes
    shape = {
        "done": done,
        "total": progress_total is not None,
        "drop_steps": drop_steps,
        "no_cursor": cursor is None,  # SQL NULL, as QuerySet.update() writes it
        "result": done and result is not None,
        "idle": idle_passes is not None,
    }
    return shape, values


def _landed(
    run: Run, shape: dict[str, bool], values: dict[str, Any], *, drop_steps: bool, tried: bool
) -> bool:
    """The commit's writes that must land together, in one transaction.

    The ledger goes with the commit, and a kicked finish starts its follow-up
    before anyone else can take the key. *tried*: the quiet form was sent
    already, and lost.
    """
    using, done = alias(), shape["done"]
    with transaction.atomic(using=using):
        won = not tried and bool(_commit(quiet=done, **shape).run(using, **values))
        kicked = False
        if not won and done:
            won = kicked = bool(_commit(quiet=False, **shape).run(using, **values))
        if won and drop_steps:
            Step.objects.using(using).filter(run_id=run.pk).delete()
        if kicked:
            follow_up(run)
    return won


# functools.cache is thread-safe; a race builds one statement twice, to equal values.
@cache
def _paired(**shape: bool) -> Paired:
    """PostgreSQL: a quiet finish of *shape* and the next pass's BEGIN, one statement."""
    return Paired(_commit(quiet=True, **shape), BEGIN)


# functools.cache is thread-safe; a race builds one statement twice, to equal values.
@cache
def _settle(*, retrying: bool) -> Statement:
    def build(runs: RunQuerySet, s: Slots) -> tuple[RunQuerySet, dict[str, Any]]:
        values: dict[str, Any] = {
            "attempts": s.attempts,
            "failure_code": s.failure_code,
            "last_error": s.error,
            **_released(s.now),
        }
        if retrying:
            values["next_attempt_at"] = plus(s.now, s.retry_in)
        else:
            values |= finished(RunStatus.FAILED, s.now)
        return held(s.run_id, s.owner, runs), values

    fields = {"attempts": AS_IS, "failure_code": AS_IS, "error": AS_IS}
    return Statement({**_HELD, **fields, "retry_in": DurationField()}, build)


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
    values = {
        "run_id": run.pk,
        "owner": owner,
        "attempts": attempts,
        "failure_code": str(failure_code),
        "error": error,
        "retry_in": retry_in,
    }
    return bool(_settle(retrying=retry_in is not None).run(alias(), **values))


_DEFER = Statement(
    {**_HELD, "delay": DurationField()},
    lambda runs, s: (
        held(s.run_id, s.owner, runs),
        {"next_attempt_at": plus(s.now, s.delay), **_released(s.now)},
    ),
)


@conflicts_retried
def defer(run: Run, owner: str, delay: timedelta) -> bool:
    """Put the run off by *delay* without charging an attempt (R8).

    Attempts and the failure stay as they were.
    """
    return bool(_DEFER.run(alias(), run_id=run.pk, owner=owner, delay=delay))


@conflicts_retried
def hold(run: Run, owner: str) -> bool:
    """Hold a run whose interrupted pass must not be replayed (L3).

    Status ``held`` with failure ``interrupted``; it keeps its live key (a
    held run is live, R1) and waits for an operator's ``release``.
    """
    at = now()
    return bool(
        held(run.pk, owner).update(
            status=RunStatus.HELD,
            failure_code=FailureCode.INTERRUPTED,
            next_attempt_at=None,
            **_released(at),
        )
    )
