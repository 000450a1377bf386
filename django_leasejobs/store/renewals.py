"""A begun pass's lease renewals, each fenced on its owner token (SPEC L7, R5).

While a pass runs, its lease is renewed -- alone (the heartbeat,
``check()``, a begin that found too little lease left) or carrying the
record of a step it just ran, so the ledger and the lease move together.
Each returns ``False``, writing nothing, when *owner* no longer holds the
run: the lease expired and another worker took it over, or an operator
cancelled it. The caller then stops the pass: it holds the run no more.

Apart from the outcomes (:mod:`.commits`, :mod:`.setbacks`) because a
renewal ends nothing: the pass goes on. Each is a :class:`~.sql.Statement`
(or, with a step's record on PostgreSQL, :class:`~.sql.Carried`): compiled
once, bound per call.
"""

from __future__ import annotations

from datetime import timedelta
from functools import cache
from typing import Any

from django.db import IntegrityError, connections, transaction
from django.db.models import DurationField

from django_leasejobs.clock import plus
from django_leasejobs.models import Run, Step
from django_leasejobs.querysets import RunQuerySet

from .base import FENCE_SLOTS, alias, conflicts_retried, fenced, now
from .sql import AS_IS, KEY, Carried, Slots, Statement

__all__ = ["record_step", "renew"]


# functools.cache is thread-safe; a race builds one statement twice, to equal values.
@cache
def _renewal(*, with_step: bool, strict: bool = False) -> Statement:
    """L7: the lease renewed to now + lease -- with a step's record, or alone (``check()``).

    *strict* (a pass holding a concurrency slot, C2): only while the lease is
    unexpired too, so a lease that ran out -- its slot free for another pass
    -- is never revived.
    """

    def build(runs: RunQuerySet[Run], s: Slots) -> tuple[RunQuerySet[Run], dict[str, Any]]:
        values = {"next_attempt_at": plus(s.now, s.lease), "updated_at": s.now}
        rows = fenced(s.run_id, s.owner, runs)
        rows = rows.lease_ends_after(s.now) if strict else rows
        return rows, values | ({"has_steps": True} if with_step else {})

    return Statement({**FENCE_SLOTS, "lease": DurationField()}, build)


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
        {**FENCE_SLOTS, "lease": DurationField(), "name": KEY, "result": AS_IS, "attempts": AS_IS}
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
