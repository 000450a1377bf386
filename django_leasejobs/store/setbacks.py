"""A pass's outcomes that write none of its work: failed, put off, or held (SPEC R4, R8, L3).

:func:`settle` records a failed pass (a retry after a backoff, or failed for
good), :func:`defer` puts the run off without charging an attempt, and
:func:`hold` keeps a run whose interrupted pass must not be replayed for an
operator. Cursor, counters and the step ledger stay as the last commit left
them.

Apart from :mod:`.commits` because none of these writes what the handler
produced. Each returns ``False``, writing nothing, when *owner* no longer
holds the run: the caller then reports the pass ``superseded``. A settle
and a defer are :class:`~.sql.Statement` s, compiled once, bound per call; a
hold, rare, is the ``QuerySet.update()`` it reads as.
"""

from __future__ import annotations

from datetime import timedelta
from functools import cache
from typing import Any

from django.db.models import DurationField

from django_leasejobs.clock import plus
from django_leasejobs.models import Run
from django_leasejobs.querysets import RunQuerySet
from django_leasejobs.states import FailureCode, RunStatus

from .base import FENCE_SLOTS, alias, conflicts_retried, fenced, finished, now, released
from .sql import AS_IS, Slots, Statement

__all__ = ["defer", "hold", "settle"]


# functools.cache is thread-safe; a race builds one statement twice, to equal values.
@cache
def _settle(*, retrying: bool) -> Statement:
    def build(runs: RunQuerySet[Run], s: Slots) -> tuple[RunQuerySet[Run], dict[str, Any]]:
        values: dict[str, Any] = {
            "attempts": s.attempts,
            "failure_code": s.failure_code,
            "last_error": s.error,
            **released(s.now),
        }
        if retrying:
            values["next_attempt_at"] = plus(s.now, s.retry_in)
        else:
            values |= finished(RunStatus.FAILED, s.now)
        return fenced(s.run_id, s.owner, runs), values

    fields = {"attempts": AS_IS, "failure_code": AS_IS, "error": AS_IS}
    return Statement({**FENCE_SLOTS, **fields, "retry_in": DurationField()}, build)


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
    {**FENCE_SLOTS, "delay": DurationField()},
    lambda runs, s: (
        fenced(s.run_id, s.owner, runs),
        {"next_attempt_at": plus(s.now, s.delay), **released(s.now)},
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
        fenced(run.pk, owner).update(
            status=RunStatus.HELD,
            failure_code=FailureCode.INTERRUPTED,
            next_attempt_at=None,
            **released(at),
        )
    )
