"""A pass's commit: what it did, written in one fenced statement (SPEC R3, L8, §13).

:func:`commit` writes a returned pass's cursor, counters and result and
releases the lease; a finish that a kick asked to follow up starts the
follow-up in the same transaction; on PostgreSQL a pass that took steps drops
its ledger in the commit's own statement (:class:`~.sql.Dropping`). Two
commits carry the next pass's first writes as well, each in a module of its
own that builds on this one's shapes: :mod:`.next_begin` (the BEGIN of the
next run claimed ahead) and :mod:`.next_pass` (the same run's next pass,
claimed and begun in its advance).

Apart from :mod:`.setbacks` because a commit is the one outcome that writes
the handler's work, and the one with several shapes: each shape a
:class:`~.sql.Statement`, compiled once and bound per call. Each verb
returns ``False``, writing nothing, when *owner* no longer holds the run:
the caller then reports the pass ``superseded``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from django.db import connections, transaction

from django_leasejobs.models import Run, Step
from django_leasejobs.querysets import RunQuerySet
from django_leasejobs.states import RunStatus

from .base import FENCE_SLOTS, alias, conflicts_retried, fenced, finished, follow_up, released
from .sql import AS_IS, Dropping, Slots, Statement

__all__ = ["Written", "commit"]


def work(s: Slots, *, no_cursor: bool, total: bool, drop_steps: bool, idle: bool) -> dict[str, Any]:
    """What a commit writes of the pass's work: its cursor and counters, its failures cleared.

    And, in the shapes that write them, the run's total, its ledger gone, and its
    count of idle passes.
    """
    values = {
        "cursor": None if no_cursor else s.cursor,
        "counters": s.counters,
        "attempts": 0,
        "failure_code": "",
        "last_error": "",
    }
    if total:
        values["progress_total"] = s.total
    if drop_steps:
        values["has_steps"] = False
    if idle:
        values["idle_passes"] = s.idle_passes
    return values


# functools.cache is thread-safe; a race builds one statement twice, to equal values.
@cache
def commit_statement(
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
        values = work(s, no_cursor=no_cursor, total=total, drop_steps=drop_steps, idle=idle)
        values |= released(s.now)
        values |= finished(RunStatus.DONE, s.now) if done else {"next_attempt_at": s.now}
        if result:
            values["result"] = s.result
        rows = fenced(s.run_id, s.owner, runs)
        return (rows.filter(rerun_requested=False) if quiet else rows), values

    fields = {"cursor": AS_IS, "counters": AS_IS, "total": AS_IS, "result": AS_IS}
    return Statement({**FENCE_SLOTS, **fields, "idle_passes": AS_IS}, build)


@dataclass(frozen=True, slots=True)
class Written:
    """What a pass that returned writes in its commit (R3), whichever commit carries it.

    *cursor* is the run's new cursor (the old one when the handler supplied
    none); *counters* the merged counters and *result* the finish's result,
    each already encoded. *idle_passes*, when given, is the run's new count
    of passes in a row that changed nothing
    (:data:`~django_leasejobs.passes.IDLE_PASSES_WARN`); the lease makes the
    count read at the claim the row's own.
    """

    run: Run
    owner: str
    cursor: str | None
    counters: str
    done: bool = False
    progress_total: int | None = None
    drop_steps: bool = False
    result: str | None = None
    idle_passes: int | None = None

    def shape(self) -> tuple[dict[str, bool], dict[str, Any]]:
        """Which compiled form of the commit writes it, and the values it is bound to."""
        values: dict[str, Any] = {"run_id": self.run.pk, "owner": self.owner}
        values |= {"cursor": self.cursor, "counters": self.counters, "result": self.result}
        values |= {"total": self.progress_total, "idle_passes": self.idle_passes}
        shape = {
            "done": self.done,
            "total": self.progress_total is not None,
            "drop_steps": self.drop_steps,
            "no_cursor": self.cursor is None,  # SQL NULL, as QuerySet.update() writes it
            "result": self.done and self.result is not None,
            "idle": self.idle_passes is not None,
        }
        return shape, values


@conflicts_retried
def commit(written: Written) -> bool:
    """Commit a pass that returned (R3), in one transaction.

    Writes the cursor, the merged counters, ``attempts = 0``, a cleared
    failure and a released lease due now (L8), and drops the pass's step
    ledger. Done: status ``done``, ``ended_at`` stamped, ``live_key``
    cleared -- and if a kick asked for it (``rerun_requested``), the
    follow-up run starts in the same transaction, so the key is never free
    for a moment in between. A finish with a result stores it in the run's
    ``result``.
    """
    using, done, drop_steps = alias(), written.done, written.drop_steps
    shape, values = written.shape()
    # A finish first tries the form no kick asked to follow up; most finishes
    # are that, and then nothing needs to be read back.
    if not drop_steps:
        if commit_statement(quiet=done, **shape).run(using, **values):
            return True  # One statement, so no transaction: an advance, or a quiet finish.
    elif connections[using].vendor == "postgresql":
        if _dropping(quiet=done, **shape).run(using, **values):
            return True  # The ledger dropped in the commit's own statement.
    else:
        return landed(written.run, shape, values, drop_steps=drop_steps, tried=False)
    return landed(written.run, shape, values, drop_steps=drop_steps, tried=True)


def landed(
    run: Run, shape: dict[str, bool], values: dict[str, Any], *, drop_steps: bool, tried: bool
) -> bool:
    """The commit's writes that must land together, in one transaction.

    The ledger goes with the commit, and a kicked finish starts its follow-up
    before anyone else can take the key. *tried*: the quiet form was sent
    already, and lost.
    """
    using, done = alias(), shape["done"]
    with transaction.atomic(using=using):
        won = not tried and bool(commit_statement(quiet=done, **shape).run(using, **values))
        kicked = False
        if not won and done:
            won = kicked = bool(commit_statement(quiet=False, **shape).run(using, **values))
        if won and drop_steps:
            Step.objects.using(using).filter(run_id=run.pk).delete()
        if kicked:
            follow_up(run)
    return won


# functools.cache is thread-safe; a race builds one statement twice, to equal values.
@cache
def _dropping(**shape: bool) -> Dropping:
    """PostgreSQL: a commit of *shape* that drops the pass's step ledger, one statement."""
    return Dropping(commit_statement(**shape))
