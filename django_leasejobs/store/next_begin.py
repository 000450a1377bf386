"""A finish that carries the BEGIN of the next run claimed ahead (SPEC R3, L4, §13).

A drive of many short passes claims several runs at once (claims made
ahead); each pass's finish then writes the next one's BEGIN with it, so
such a drive sends one statement per pass: on PostgreSQL one statement
(:class:`~.sql.Paired`), elsewhere one transaction. The finish is
:func:`~.commits.commit`'s own shape; the BEGIN is :data:`~.claims.BEGIN`.
"""

from __future__ import annotations

from datetime import timedelta
from functools import cache
from typing import NamedTuple

from django.db import connections, transaction

from .base import alias, conflicts_retried
from .claims import BEGIN
from .commits import Written, commit_statement, landed
from .sql import Paired
from .unanswered import Unanswered, unanswered_if_lost

__all__ = ["NextBegin", "commit_and_begin"]


class NextBegin(NamedTuple):
    """The next pass's BEGIN (L4), carried in this pass's commit: whose run, whose claim."""

    run_id: str
    owner: str
    margin: timedelta


@conflicts_retried
def commit_and_begin(written: Written, then: NextBegin) -> tuple[bool, bool]:
    """Finish a pass (R3) and BEGIN the next run's claimed pass (L4) in one commit (§13).

    The finish is :func:`commit`'s, of a pass that is done and recorded no
    step; *then* is the next pass's BEGIN, exactly as
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
        return _commit_and_begin(written, then)


def _commit_and_begin(written: Written, then: NextBegin) -> tuple[bool, bool]:
    using = alias()
    shape, values = written.shape()
    values |= {"next_run_id": then.run_id, "next_owner": then.owner, "next_margin": then.margin}
    if connections[using].vendor == "postgresql":
        won, began = _paired(**shape).run(using, **values)
    else:
        with transaction.atomic(using=using):
            won = commit_statement(quiet=True, **shape).run(using, **values)
            began = BEGIN.run(using, run_id=then.run_id, owner=then.owner, margin=then.margin)
    if not won:  # a kick asked to follow this finish up: its own transaction
        won = landed(written.run, shape, values, drop_steps=False, tried=True)
    return bool(won), bool(began)


# functools.cache is thread-safe; a race builds one statement twice, to equal values.
@cache
def _paired(**shape: bool) -> Paired:
    """PostgreSQL: a quiet finish of *shape* and the next pass's BEGIN, one statement."""
    return Paired(commit_statement(quiet=True, **shape), BEGIN)
