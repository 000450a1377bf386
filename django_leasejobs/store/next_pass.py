"""An advance that claims and begins its run's next pass (SPEC R3, L2, L4, §13).

In a drive of several passes of one run (``max_passes``: a ``p.walk()``
backfill) the advance writes the next pass's claim and BEGIN in place of the
lease it releases, so one statement goes between a pass's work and the
next's; :mod:`django_leasejobs.going_on` decides when a drive asks for it.
Where an ``UPDATE`` returns rows only (:func:`goes_on`); with a ledger to
drop, on PostgreSQL in the same statement (:class:`~.sql.Dropping`).
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

from .base import FENCE_SLOTS, alias, conflicts_retried, fenced
from .commits import Written, work
from .sql import AS_IS, KEY, Dropping, Slots, Statement, returns_rows
from .unanswered import Unanswered, unanswered_if_lost

__all__ = ["NextPass", "commit_and_go_on", "goes_on"]


class NextPass(NamedTuple):
    """The same run's next pass (L2, L4), claimed and begun in this pass's advance."""

    owner: str
    holder: str
    lease: timedelta


def goes_on(using: str) -> bool:
    """Whether *using* can claim a run's next pass in its advance: its UPDATE returns rows."""
    return returns_rows(using)


@conflicts_retried
def commit_and_go_on(written: Written, then: NextPass) -> Run | None:
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
    using, run, drop_steps = alias(), written.run, written.drop_steps
    shape, values = written.shape()
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


# functools.cache is thread-safe; a race builds one statement twice, to equal values.
@cache
def _gone_on(*, total: bool, drop_steps: bool, no_cursor: bool, idle: bool) -> Statement:
    """R3 + L2 + L4: an advance that claims and begins its run's next pass, one UPDATE.

    The advance's own values as :func:`.commits.commit_statement` writes them, and in place of
    the released lease the next pass's: a new owner token, this process as
    holder, begun now, expiring a lease from now (a claim's and a BEGIN's
    writes together). Fenced on this pass's owner (L6), and refused for a
    queue paused meanwhile, as BEGIN refuses it (W6).
    """

    def build(runs: RunQuerySet[Run], s: Slots) -> tuple[RunQuerySet[Run], dict[str, Any]]:
        values = work(s, no_cursor=no_cursor, total=total, drop_steps=drop_steps, idle=idle)
        values |= {
            "lease_owner": s.next_owner,
            "lease_holder": s.holder,
            "lease_began_at": s.now,
            "admission_misses": None,
            "next_attempt_at": plus(s.now, s.lease),
            "updated_at": s.now,
        }
        return fenced(s.run_id, s.owner, runs).unpaused(), values

    fields = {"cursor": AS_IS, "counters": AS_IS, "total": AS_IS, "idle_passes": AS_IS}
    lease = {"next_owner": KEY, "holder": AS_IS, "lease": DurationField()}
    return Statement({**FENCE_SLOTS, **fields, **lease}, build)


# functools.cache is thread-safe; a race builds one statement twice, to equal values.
@cache
def _dropping_gone_on(**shape: bool) -> Dropping:
    """PostgreSQL: an advance of *shape* going on to the next pass, dropping the ledger."""
    return Dropping(_gone_on(**shape))
