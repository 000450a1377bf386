"""The work now, from the runs themselves (SPEC §16: O2, O4, O5).

Each queue's due runs and how long its oldest due run has waited, the runs
that want an operator's eye -- held, stalled, throttled -- and the overdue
schedules. Every read is a range of an index that leads with the run's
status, so its cost tracks the live runs, never the retained history.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import router
from django.db.models import Count, Min, Q

from django_leasejobs.clock import get_clock
from django_leasejobs.conf import conf
from django_leasejobs.models import PausedQueue, Run, Schedule
from django_leasejobs.registry import registry
from django_leasejobs.states import RunStatus
from django_leasejobs.tasks.aliases import our_aliases

__all__ = [
    "Attention",
    "QueueFigures",
    "attention",
    "every_queue",
    "named_queues",
    "queues",
    "runs",
    "stalled_before",
]

#: The most live runs one read of stalled runs looks at (their count is then "at least").
STALLED_SCAN_MAX = 10_000


@dataclass(frozen=True)
class QueueFigures:
    """One queue now: its due runs, the age of the oldest, and whether it is paused (W6)."""

    queue: str
    due: int
    oldest_due_seconds: float | None
    live: int
    paused: PausedQueue | None = None


@dataclass(frozen=True)
class Attention:
    """What wants an operator's eye now: held, stalled and throttled runs, overdue schedules."""

    held: int
    stalled: int
    throttled: int
    overdue: int
    #: Live runs per status (``running``, ``held``).
    live: dict[str, int] = field(default_factory=dict)


def runs() -> Any:
    return Run.objects.using(router.db_for_read(Run))


def queues(now: datetime | None = None) -> list[QueueFigures]:
    """Every queue with live runs, or paused: its due depth and lag (O2, O5), by name.

    Two reads along the due index (live runs by queue; due runs by queue) and
    one of the paused queues.
    """
    now = now or get_clock().now(router.db_for_read(Run))
    live = dict(runs().running().values_list("queue").annotate(n=Count("id")).order_by())
    due = {
        queue: (n, oldest)
        for queue, n, oldest in runs()
        .due(now)
        .values_list("queue")
        .annotate(n=Count("id"), oldest=Min("next_attempt_at"))
        .order_by()
        .values_list("queue", "n", "oldest")
    }
    paused = {row.queue: row for row in PausedQueue.objects.using(router.db_for_read(Run))}
    names = sorted(set(live) | set(due) | set(paused))
    figures = []
    for name in names:
        n, oldest = due.get(name, (0, None))
        age = None if oldest is None else max(0.0, (now - oldest).total_seconds())
        figures.append(QueueFigures(name, n, age, live.get(name, 0), paused.get(name)))
    return figures


def attention(now: datetime | None = None) -> Attention:
    """Held, stalled and throttled runs and overdue schedules, now (O2, O4)."""
    using = router.db_for_read(Run)
    now = now or get_clock().now(using)
    live = dict(runs().live().values_list("status").annotate(n=Count("id")).order_by())
    throttled = runs().throttled().count()
    overdue = (
        Schedule.objects.using(using).filter(enabled=True, overdue_since__isnull=False).count()
    )
    return Attention(
        held=live.get(RunStatus.HELD, 0),
        stalled=_stalled(now),
        throttled=throttled,
        overdue=overdue,
        live={str(status): n for status, n in live.items()},
    )


def stalled_before(job: str) -> timedelta:
    """How long a run of *job* may stay live before it reads as stalled (S6)."""
    spec = registry.get(job) if job in registry else None
    return (spec.stall_after if spec else None) or conf.STALL_AFTER


def _stalled(now: datetime) -> int:
    """Running runs live longer than their job's ``stall_after`` (S6), counted by the database.

    One count over the running runs (the status index), at most
    :data:`STALLED_SCAN_MAX` of them: each job's own ``stall_after`` is a
    condition on ``started_at``, one per distinct time, and every other job
    (the default, or one this process does not register) has
    ``STALL_AFTER``'s. Counted here row by row instead, a few thousand
    running runs cost a scrape tens of milliseconds of parsing dates.
    """
    own: dict[timedelta, list[str]] = {}
    for spec in registry:
        if spec.stall_after:
            own.setdefault(spec.stall_after, []).append(spec.name)
    named = [name for names in own.values() for name in names]
    past = Q(started_at__lt=now - conf.STALL_AFTER) & ~Q(job__in=named)
    for after, names in own.items():
        past |= Q(job__in=names, started_at__lt=now - after)
    old = runs().filter(past).running().values("pk")[:STALLED_SCAN_MAX]
    stalled: int = old.count()
    return stalled


def named_queues() -> set[str]:
    """The queues this process's jobs and task backends name (W4, §9), busy or idle."""
    named = {spec.queue for spec in registry}
    for _alias, params in our_aliases():
        named |= {queue for queue in params.get("QUEUES", ()) if isinstance(queue, str)}
    return named


def every_queue(now: datetime | None = None) -> list[QueueFigures]:
    """:func:`queues`, and the queues the code names that have no live run, by name (O5).

    An operator can pause a queue before its work arrives; an idle queue
    reads as no due runs and no lag.
    """
    found = {figures.queue: figures for figures in queues(now)}
    for name in named_queues() - set(found):
        found[name] = QueueFigures(name, 0, None, 0)
    return [found[name] for name in sorted(found)]
