"""Starting runs: the run-creating every origin shares, once its job is found (SPEC R1, R2)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from django.db.models import Model
from django.utils import timezone

from django_leasejobs.codec import encode, storable_text
from django_leasejobs.definition import Definition
from django_leasejobs.errors import refused_when_full
from django_leasejobs.exceptions import InvalidKey, StartContended
from django_leasejobs.ids import new_id
from django_leasejobs.models import INSTANCE_LENGTH, Run
from django_leasejobs.policy import MAX_DELAY
from django_leasejobs.querysets import live_key
from django_leasejobs.routing import priority_problem, queue_problem
from django_leasejobs.states import LIVE_STATUSES, RunOrigin, RunStatus
from django_leasejobs.tracing import carrier

from .announce import announcer
from .base import CHANNEL, alias, conflicts_retried, new_run, notifies, now, runs
from .cancels import free_expired_cancel
from .sql import Insert, Unnest, insert_ignoring, returns_rows

__all__ = [
    "Route",
    "Row",
    "StartResult",
    "check_key",
    "check_run_after",
    "insert",
    "join",
    "limit_key_of",
    "routed",
    "start_as",
]

logger = logging.getLogger("django_leasejobs")


#: How often start() goes round "insert lost, yet no live run found": each
#: round means a live run finished between our insert and our read, which a
#: busy key can do a few times in a row but never indefinitely.
START_ROUNDS = 10


@dataclass(frozen=True)
class StartResult:
    """What a start did: the run, and whether it was already live (R1)."""

    run: Run
    joined: bool


@conflicts_retried
def start_as(
    origin: RunOrigin,
    spec: Definition,
    payload: Any = None,
    *,
    instance: str = "default",
    again: bool = False,
    run_after: datetime | None = None,
    queue: str | None = None,
    priority: int | None = None,
) -> StartResult:
    """Start a run of *spec*, or join the live one (R1), recording how it began (``origin``, §2).

    What :func:`django_leasejobs.start` does once it has found the job; the
    schedules, the operators and a job's own ``start()`` call it with theirs.
    """
    check_key("instance", instance, INSTANCE_LENGTH)
    check_run_after(run_after)
    route = routed(spec, queue, priority)
    text = encode(payload, "payload")
    limited = limit_key_of(spec, payload)
    with refused_when_full(spec.name):  # F8: a clear error, nothing written
        if not spec.coalesce:
            # Every start is its own run: no key, so nothing to join (a task, §9).
            row = Row(new_id(), instance, text, None, limited)
            return StartResult(
                insert(spec.name, origin, [row], route, run_after=run_after)[0], False
            )
        key = live_key(spec.name, instance)
        for _ in range(START_ROUNDS):
            # The unique live_key decides, inside the database, which of any number
            # of concurrent callers inserts; the others join the run it holds.
            row = Row(new_id(), instance, text, key, limited)
            inserted = insert(spec.name, origin, [row], route, run_after=run_after)
            if inserted:
                return StartResult(inserted[0], joined=False)
            joined = join(key, text, again=again)
            if joined is not None:
                return StartResult(joined, joined=True)
            # The live run finished between our insert and our read: insert again.
        raise StartContended(
            f"could not start or join a run of {spec.name!r} [{instance}]: "
            f"the insert kept conflicting and no live run was found"
        )


def limit_key_of(spec: Definition, payload: Any, name: str = "limit key") -> str | None:
    """C1: the key a new run of *spec* with *payload* is limited under, computed once, here.

    Refused naming the job (§11): a key function is the job's code.
    """
    return None if spec.limit is None else spec.limit.key_of(payload, f"job {spec.name!r}: {name}")


def check_run_after(run_after: object, name: str = "run_after") -> None:
    """Refuse a ``run_after`` no run can be due at (§11): naive, not a datetime, too far."""
    if run_after is None:
        return
    if not isinstance(run_after, datetime) or run_after.tzinfo is None:
        raise ValueError(f"{name} must be an aware datetime, got {run_after!r}")
    if run_after > timezone.now() + MAX_DELAY:
        raise ValueError(f"{name} must be at most {MAX_DELAY.days} days ahead, got {run_after}")


class Route(NamedTuple):
    """Where a new run goes and in what turn: its queue (W4) and priority (D7)."""

    queue: str
    priority: int


def routed(spec: Definition, queue: object, priority: object) -> Route:
    """*spec*'s own queue and priority, or the overrides given, once they are checked (§11)."""
    queue = spec.queue if queue is None else queue
    priority = spec.priority if priority is None else priority
    for problem in (queue_problem("queue", queue), priority_problem("priority", priority)):
        if problem:
            raise ValueError(problem)
    return Route(queue, priority)  # type: ignore[arg-type]  # checked just above


class Row(NamedTuple):
    """What a new run is given: the rest is the model's defaults and the database's time."""

    id: str
    instance: str
    payload: str
    #: ``None`` for a run that coalesces with none (a task's, SPEC §9).
    live_key: str | None
    #: Whose limits the run counts against (C1); ``None``: the job's own, or none.
    limit_key: str | None = None


_INSERT = Insert(new_run)
_UNNEST = Unnest(new_run)


def insert(
    job: str,
    origin: RunOrigin,
    rows: list[Row],
    route: Route,
    *,
    run_after: datetime | None = None,
) -> list[Run]:
    """Insert *rows* as live runs, due now or at *run_after*; return those whose key was free.

    One statement where the backend returns the inserted rows (PostgreSQL,
    SQLite) -- for a batch, one whose parameters do not grow with it -- and
    on PostgreSQL it also notifies waiting workers (W2) when a run went in:
    at commit, so never for a rollback. On MariaDB one ``INSERT IGNORE`` of
    the rows, then one read of those that went in.
    """
    using = alias()
    deferred = run_after is not None
    if not returns_rows(using):
        return _insert_and_read(job, origin, rows, route, run_after)
    values: dict[str, Any] = {"job": job, "origin": origin, "channel": CHANNEL}
    values |= route._asdict()
    values["trace_context"] = carrier()  # O3: the starter's trace, for its passes to link to
    values["run_after"] = run_after
    # A run due later wakes nobody: the first drive after it is due finds it.
    if not notifies(using) or (run_after is not None and run_after > timezone.now()):
        return _inserted(using, values, rows, notify=False, deferred=deferred)
    # In autocommit, one notifying commit in flight per process: the lock PostgreSQL
    # takes at such a commit would queue every other (§13, :mod:`.announce`).
    notice = announcer.notice(using)
    inserted: list[Run] = []
    try:
        inserted = _inserted(using, values, rows, notify=notice.carries, deferred=deferred)
    finally:
        announcer.done(using, notice, wrote=bool(inserted))
    return inserted


def _inserted(
    using: str, values: dict[str, Any], rows: list[Row], *, notify: bool, deferred: bool
) -> list[Run]:
    """The one statement of :func:`insert` where the backend returns rows."""
    if len(rows) > 1 and _UNNEST.works(using):
        return _UNNEST.run(using, values, rows, notify=notify, deferred=deferred)
    return _INSERT.run(using, values, rows, notify=notify, deferred=deferred)


def _insert_and_read(
    job: str, origin: RunOrigin, rows: list[Row], route: Route, run_after: datetime | None
) -> list[Run]:
    at, context = now(), carrier()  # O3
    due = run_after if run_after is not None else at
    objects: list[Model] = [
        new_run(
            **row._asdict(),
            job=job,
            origin=origin,
            **route._asdict(),
            trace_context=context,
            at=at,
            due=due,
        )
        for row in rows
    ]
    # MariaDB: none went in, and there is nothing to read.
    if not insert_ignoring(alias(), objects):
        return []
    return list(runs().filter(pk__in=[row.id for row in rows]))


def join(key: str, payload: str, *, again: bool) -> Run | None:
    """Join the run holding *key*, kicking it when asked; ``None`` if none holds it now."""
    live = runs().filter(live_key=key).first()
    if live is None:
        return None
    if live.status == RunStatus.CANCELLED:
        if free_expired_cancel(live.pk):
            return None  # Its pass died with the lease: the key is free now.
        again = True  # Its pass is still stopping: this start follows it.
    elif live.status not in LIVE_STATUSES:
        logger.warning(
            "Start joined a stranded run id=%s status=%r: it holds the key of %s but is not "
            "live (cancel it to free the key)",
            live.pk,
            live.status,
            key,
        )
    if again:
        # By primary key, as a commit locks the row: one lock order, so a kick
        # and a finishing commit never deadlock (MariaDB, §12).
        if (
            not runs()
            .filter(pk=live.pk, live_key=key)
            .update(rerun_requested=True, rerun_payload=payload)
        ):
            return None  # It finished between our read and the kick.
        live.rerun_requested, live.rerun_payload = True, payload
    return live


def check_key(name: str, value: object, longest: int) -> None:
    """Refuse a key (an instance, a step name) no backend can store and compare."""
    if not isinstance(value, str) or not 0 < len(value) <= longest:
        raise InvalidKey(name, value, f"must be a non-empty str of at most {longest} characters")
    if "\x00" in value or storable_text(value) != value:
        raise InvalidKey(
            name, value, "holds a NUL or a lone surrogate, which a database cannot store"
        )
