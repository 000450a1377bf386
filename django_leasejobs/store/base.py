"""What every store verb shares: the database, its clock, the fence, the finished
and released values, a new run's columns, and retrying a lost race."""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from django.db import DatabaseError, connections, router
from django.db.models.expressions import Combinable

from django_leasejobs.clock import get_clock
from django_leasejobs.conf import conf
from django_leasejobs.errors import is_conflict
from django_leasejobs.ids import new_id
from django_leasejobs.models import Run
from django_leasejobs.querysets import RunQuerySet, live_key
from django_leasejobs.states import RunOrigin, RunStatus
from django_leasejobs.tracing import carrier

from .sql import KEY

__all__ = [
    "CHANNEL",
    "FENCE_SLOTS",
    "alias",
    "conflicts_retried",
    "fenced",
    "finished",
    "follow_up",
    "new_run",
    "notifies",
    "notify",
    "now",
    "released",
    "runs",
]

logger = logging.getLogger("django_leasejobs")

#: How often a write that lost a deadlock or serialization race is tried (SPEC §12).
CONFLICT_ATTEMPTS = 4

P = ParamSpec("P")
R = TypeVar("R")


def alias() -> str:
    """The database alias every run write goes to."""
    return router.db_for_write(Run)


def runs() -> RunQuerySet[Run]:
    return Run.objects.using(alias())


def fenced(run_id: str, owner: str, among: RunQuerySet[Run] | None = None) -> RunQuerySet[Run]:
    """Run *run_id* while *owner* holds it: the fence of every write of a pass (L6).

    Of :func:`runs`, or of *among* -- a compiled statement's builder is given
    the queryset of the database it is compiled for.
    """
    return (runs() if among is None else among).owned_by(owner).filter(pk=run_id)


#: The slots of :func:`fenced`'s fence in a compiled statement (:class:`~.sql.Statement`).
FENCE_SLOTS = {"run_id": KEY, "owner": KEY}


def now() -> Combinable:
    """ "Now" as the database evaluates it in the statement that carries it (L1)."""
    return get_clock().now_expr()


#: The PostgreSQL channel on which a write that makes a run due sooner is announced (W2).
CHANNEL = "django_leasejobs"


def notifies(using: str) -> bool:
    """Whether writes on *using* announce new work: PostgreSQL, unless ``NOTIFY`` is off (W2)."""
    return conf.NOTIFY and connections[using].vendor == "postgresql"


def notify(using: str) -> None:
    """Announce new work on *using*'s channel, in the current transaction (W2)."""
    if notifies(using):
        with connections[using].cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, '')", [CHANNEL])


def finished(status: RunStatus, at: Any) -> dict[str, Any]:
    """The values that end a run: its status, ``ended_at``, and its key let go (R1, R3, R4)."""
    return {"status": status, "next_attempt_at": None, "ended_at": at, "live_key": None}


def released(at: Any) -> dict[str, Any]:
    """L8: an outcome lets go of the lease (and ``next_attempt_at`` says when next)."""
    return {"lease_owner": None, "lease_began_at": None, "updated_at": at}


def new_run(
    *,
    id: Any,
    job: Any,
    instance: Any,
    payload: Any,
    origin: Any,
    queue: Any,
    priority: Any,
    live_key: Any,
    limit_key: Any,
    trace_context: Any,
    at: Any,
    due: Any,
) -> Run:
    """A new run's columns, unsaved: live, stamped *at*, due at *due* (R1, O3).

    The one place they are written, whichever way a run is made: ``start()``'s
    and the tasks backend's compiled ``INSERT`` (:class:`~.sql.Insert`, which
    gives its slots here), MariaDB's ``INSERT IGNORE`` and a kick's follow-up
    (given values). Every column not named is the model's default: no
    attempt, no lease, no cursor. No argument has a default, so no way of
    making a run can leave one out -- the trace context of the code that made
    it included (:func:`~django_leasejobs.tracing.carrier`).
    """
    return Run(
        id=id,
        job=job,
        instance=instance,
        origin=origin,
        payload=payload,
        queue=queue,
        priority=priority,
        status=RunStatus.RUNNING,
        started_at=at,
        updated_at=at,
        next_attempt_at=due,
        live_key=live_key,
        limit_key=limit_key,
        trace_context=trace_context,
    )


def follow_up(previous: Run) -> None:
    """Start the kicked follow-up of *previous*, inside the transaction that frees its key."""
    payload = runs().values_list("rerun_payload", flat=True).get(pk=previous.pk)
    at = now()
    run = new_run(
        id=new_id(),
        job=previous.job,
        instance=previous.instance,
        payload=payload or "null",
        origin=RunOrigin.FOLLOW_UP,
        # The same work again: it goes where the kicked run went, in its turn.
        queue=previous.queue,
        priority=previous.priority,
        live_key=live_key(previous.job, previous.instance),
        # Counted where the kicked run was: the same work item (C1).
        limit_key=previous.limit_key,
        # O3: the trace of the code making it (the pass that finished the kicked
        # run, or the code that freed its key after a cancel), as for every run.
        trace_context=carrier(),
        at=at,
        due=at,
    )
    run.save(using=alias(), force_insert=True)
    notify(alias())


def conflicts_retried(verb: Callable[P, R]) -> Callable[P, R]:
    """Run *verb* again when it loses a deadlock or serialization race (SPEC §12).

    Only when it runs on its own: inside a caller's transaction, MariaDB has
    already rolled the whole transaction back and PostgreSQL refuses any
    further statement in it, so the error goes to the caller, whose
    transaction it is to retry.
    """

    @functools.wraps(verb)
    def retried(*args: P.args, **kwargs: P.kwargs) -> R:
        own = not connections[alias()].in_atomic_block
        for attempt in range(1, CONFLICT_ATTEMPTS + 1):
            try:
                return verb(*args, **kwargs)
            except DatabaseError as exc:
                if not (own and attempt < CONFLICT_ATTEMPTS and is_conflict(exc)):
                    raise
                logger.info("Write %s lost a race (attempt %s); again", verb.__name__, attempt)
                time.sleep(random.uniform(0.001, 0.01 * attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    return retried
