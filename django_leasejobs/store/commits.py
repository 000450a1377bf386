"""A pass's commit: what it did, written in one fenced statement (SPEC R3, L8, §13).

:func:`commit` writes a returned pass's cursor, counters and result and
releases the lease; a finish that a kick asked to follow up starts the
follow-up in the same transaction; on PostgreSQL a pass that took steps drops
its ledger in the commit's own statement (:class:`~.sql.Dropping`).
:func:`commit_and_begin` also carries the
next claimed run's BEGIN (:class:`NextBegin`), so a drive of many short
passes sends one statement per pass; :func:`commit_and_go_on` claims and
begins the same run's next pass in its advance (:class:`NextPass`), so a
drive of many passes of one run -- a ``p.walk()`` backfill -- sends one
statement between a pass's work and the next's.

Apart from :mod:`.setbacks` because a commit is the one outcome that writes
the handler's work, and the one with several shapes: each shape a
:class:`~.sql.Statement`, compiled once and bound per call. Each verb
returns ``False``, writing nothing, when *owner* no longer holds the run:
the caller then reports the pass ``superseded``.
"""

from __future__ import annotations

from datetime import timedelta
from functools import cache
from typing import Any, NamedTuple

from django.db import connections, transaction
from django.db.models import DurationField

from django_leasejobs.clock import plus
from django_leasejobs.models import Run, Step
from django_leasejobs.querysets import RunQuerySet
from django_leasejobs.states import RunStatus

from .base import FENCE_SLOTS, alias, conflicts_retried, fenced, finished, follow_up, released
from .claims import BEGIN
from .sql import AS_IS, KEY, Dropping, Paired, Slots, Statement, returns_rows
from .unanswered import Unanswered, unanswered_if_lost

__all__ = ["NextBegin", "NextPass", "commit", "commit_and_begin", "commit_and_go_on"]


def _work(s: Slots, *, no_cursor: bool) -> dict[str, Any]:
    """What a commit writes of the pass's work: its cursor and counters, its failures cleared."""
    return {
        "cursor": None if no_cursor else s.cursor,
        "counters": s.counters,
        "attempts": 0,
        "failure_code": "",
        "last_error": "",
    }


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

    def build(runs: RunQuerySet[Run], s: Slots) -> tuple[RunQuerySet[Run], dict[str, Any]]:
        values = {**_work(s, no_cursor=no_cursor), **released(s.now)}
        if total:
            values["progress_total"] = s.total
        values |= finished(RunStatus.DONE, s.now) if done else {"next_attempt_at": s.now}
        if result:
            values["result"] = s.result
        if drop_steps:
            values["has_steps"] = False
        if idle:
            values["idle_passes"] = s.idle_passes
        rows = fenced(s.run_id, s.owner, runs)
        return (rows.filter(rerun_requested=False) if quiet else rows), values

    fields = {"cursor": AS_IS, "counters": AS_IS, "total": AS_IS, "result": AS_IS}
    return Statement({**FENCE_SLOTS, **fields, "idle_passes": AS_IS}, build)


# functools.cache is thread-safe; a race builds one statement twice, to equal values.
@cache
def _gone_on(*, total: bool, drop_steps: bool, no_cursor: bool, idle: bool) -> Statement:
    """R3 + L2 + L4: an advance that claims and begins its run's next pass, one UPDATE.

    The advance's own values as :func:`_commit` writes them, and in place of
    the released lease the next pass's: a new owner token, this process as
    holder, begun now, expiring a lease from now (a claim's and a BEGIN's
    writes together). Fenced on this pass's owner (L6), and refused for a
    queue paused meanwhile, as BEGIN refuses it (W6).
    """

    def build(runs: RunQuerySet[Run], s: Slots) -> tuple[RunQuerySet[Run], dict[str, Any]]:
        values = {
            **_work(s, no_cursor=no_cursor),
            "lease_owner": s.next_owner,
            "lease_holder": s.holder,
            "lease_began_at": s.now,
            "admission_misses": None,
            "next_attempt_at": plus(s.now, s.lease),
            "updated_at": s.now,
        }
        if total:
            values["progress_total"] = s.total
        if drop_steps:
            values["has_steps"] = False
        if idle:
            values["idle_passes"] = s.idle_passes
        return fenced(s.run_id, s.owner, runs).unpaused(), values

    fields = {"cursor": AS_IS, "counters": AS_IS, "total": AS_IS, "idle_passes": AS_IS}
    lease = {"next_owner": KEY, "holder": AS_IS, "lease": DurationField()}
    return Statement({**FENCE_SLOTS, **fields, **lease}, build)


class NextPass(NamedTuple):
    """The same run's next pass (L2, L4), claimed and begun in this pass's advance."""

    owner: str
    holder: str
    lease: timedelta


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
    if not drop_steps:
        if _commit(quiet=done, **shape).run(using, **values):
            return True  # One statement, so no transaction: an advance, or a quiet finish.
    elif connections[using].vendor == "postgresql":
        if _dropping(quiet=done, **shape).run(using, **values):
            return True  # The ledger dropped in the commit's own statement.
    else:
        return _landed(run, shape, values, drop_steps=drop_steps, tried=False)
    return _landed(run, shape, values, drop_steps=drop_steps, tried=True)


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


def goes_on(using: str) -> bool:
    """Whether *using* can claim a run's next pass in its advance: its UPDATE returns rows."""
    return returns_rows(using)


@conflicts_retried
def commit_and_go_on(
    run: Run,
    owner: str,
    then: NextPass,
    *,
    cursor: str | None,
    counters: str,
    progress_total: int | None,
    drop_steps: bool,
    idle_passes: int | None = None,
) -> Run | None:
    """Advance a pass (R3) and claim and begin the run's next pass (L2, L4), in one commit.

    For a drive that goes on with the same run (``max_passes``): the
    advance :func:`commit` writes, with the next pass's lease written in
    place of the released one, so the pass after it needs neither a claim
    nor a BEGIN of its own. Where the backend returns rows only
    (:func:`goes_on`); with a ledger to drop, on PostgreSQL in the same
    statement (:class:`~.sql.Dropping`), elsewhere in its transaction.

    Returns the run as the next pass claimed it, read back as a claim reads
    it; ``None`` when nothing was written -- the lease was gone, or the
    run's queue was paused meanwhile -- and the caller commits alone, which
    tells the two apart. A connection lost on the way may have applied it:
    the next pass's lease is noted, to be given back uncharged (F3); the
    advance is the pass's error, never retried (it may have applied).
    """
    using = alias()
    shape, values = _committed(
        run,
        owner,
        cursor=cursor,
        counters=counters,
        done=False,
        progress_total=progress_total,
        drop_steps=drop_steps,
        result=None,
        idle_passes=idle_passes,
    )
    del shape["done"], shape["result"]
    values |= {"next_owner": then.owner, "holder": then.holder, "lease": then.lease}
    with unanswered_if_lost(Unanswered(run.pk, then.owner)):
        if not drop_steps:
            return _gone_on(**shape).fetch(using, **values)
        if connections[using].vendor == "postgresql":
            return _dropping_gone_on(**shape).fetch(using, **values)
        with transaction.atomic(using=using):
            claimed = _gone_on(**shape).fetch(using, **values)
            if claimed is not None:
                Step.objects.using(using).filter(run_id=run.pk).delete()
        return claimed


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
def _dropping(**shape: bool) -> Dropping:
    """PostgreSQL: a commit of *shape* that drops the pass's step ledger, one statement."""
    return Dropping(_commit(**shape))


# functools.cache is thread-safe; a race builds one statement twice, to equal values.
@cache
def _dropping_gone_on(**shape: bool) -> Dropping:
    """PostgreSQL: an advance of *shape* going on to the next pass, dropping the ledger."""
    return Dropping(_gone_on(**shape))
