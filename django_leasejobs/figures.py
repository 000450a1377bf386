"""The work as a whole, read for the overview and the metrics view (SPEC §16: O2, O4, O5).

Two kinds of figures, each read by a few bounded queries:

* **Now**, from the runs themselves: each queue's due runs and how long its
  oldest due run has waited (:func:`queues`), and the runs that want an
  operator's eye -- held, stalled, throttled -- and the overdue schedules
  (:func:`attention`). Every read is a range of an index that leads with the
  run's status, so its cost tracks the live runs, never the retained history.
* **Over a window**, from the pass statistics the workers flush (O1):
  passes per interval by outcome, and per job its passes, failures and
  duration percentiles (:func:`window`). A statistics row that cannot be
  read as one -- a restore, a hand edit: an outcome outside the vocabulary,
  a negative or non-finite figure -- is counted apart as *unreadable*,
  never a 500.
* **For the overview** (O4, O5): the same window summed per interval by the
  database, for a day or a week (:func:`coarse_window`); the queues the code
  names beside the busy ones (:func:`every_queue`); and a job's last failure,
  read from its newest runs alone (:func:`last_failure`).
"""

from __future__ import annotations

import math
import operator
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import reduce
from typing import Any

from django.db import router
from django.db.models import (
    BooleanField,
    Count,
    ExpressionWrapper,
    F,
    FloatField,
    Max,
    Min,
    Q,
    Sum,
    Value,
)
from django.db.models.functions import Cast, Coalesce, Greatest, Least, Left
from django.db.models.lookups import GreaterThanOrEqual, LessThanOrEqual

from .clock import get_clock
from .conf import conf
from .models import PassStat, PausedQueue, Run, Schedule
from .models.observability import BUCKET_FIELDS, BUCKETS
from .registry import registry
from .states import PassOutcome, RunStatus
from .tasks.aliases import our_aliases

__all__ = [
    "FAILED_OUTCOMES",
    "FAILURE_SCAN",
    "Attention",
    "Failure",
    "JobFigures",
    "QueueFigures",
    "Window",
    "attention",
    "coarse_window",
    "every_queue",
    "last_failure",
    "named_queues",
    "percentile",
    "queues",
    "window",
]

#: Outcomes that are a failed pass: what the failure rate counts.
FAILED_OUTCOMES = frozenset({PassOutcome.RETRYING, PassOutcome.FAILED, PassOutcome.HELD})
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


def _runs() -> Any:
    return Run.objects.using(router.db_for_read(Run))


def queues(now: datetime | None = None) -> list[QueueFigures]:
    """Every queue with live runs, or paused: its due depth and lag (O2, O5), by name.

    Two reads along the due index (live runs by queue; due runs by queue) and
    one of the paused queues.
    """
    now = now or get_clock().now(router.db_for_read(Run))
    live = dict(
        _runs()
        .filter(status=RunStatus.RUNNING)
        .values_list("queue")
        .annotate(n=Count("id"))
        .order_by()
    )
    due = {
        queue: (n, oldest)
        for queue, n, oldest in _runs()
        .filter(status=RunStatus.RUNNING, next_attempt_at__lte=now)
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
    live = dict(
        _runs()
        .filter(status__in=(RunStatus.RUNNING, RunStatus.HELD))
        .values_list("status")
        .annotate(n=Count("id"))
        .order_by()
    )
    throttled = (
        _runs().filter(status=RunStatus.RUNNING, lease_owner__isnull=True).exclude(throttled_by="")
    ).count()
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
    """Running runs live longer than their job's ``stall_after`` (S6), at most a bounded read."""
    shortest = min([stalled_before(spec.name) for spec in registry] + [conf.STALL_AFTER])
    old = (
        _runs()
        .filter(status=RunStatus.RUNNING, started_at__lt=now - shortest)
        .values_list("job", "started_at")[:STALLED_SCAN_MAX]
    )
    return sum(1 for job, started in old if now - started > stalled_before(job))


# -- the window (O1's figures) ---------------------------------------------------------------


@dataclass
class JobFigures:
    """One job over a window: its passes, failures and durations (O4's per-job table)."""

    job: str
    passes: int = 0
    failures: int = 0
    seconds: float = 0.0
    longest: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))

    @property
    def failure_rate(self) -> float | None:
        return None if not self.passes else self.failures / self.passes

    @property
    def p50(self) -> float | None:
        return percentile(self.buckets, 0.5, self.longest)

    @property
    def p95(self) -> float | None:
        return percentile(self.buckets, 0.95, self.longest)


@dataclass
class Window:
    """The passes of a window, per interval and outcome, and per job (O1 -> O2, O4)."""

    since: datetime
    until: datetime
    step: timedelta
    #: Interval start -> outcome -> passes.
    series: dict[datetime, dict[str, int]]
    jobs: dict[str, JobFigures]
    #: (job, queue, outcome) -> passes and their bucket counts: what O2 exposes.
    by_key: dict[tuple[str, str, str], tuple[int, float, list[int]]]
    #: Statistics rows that could not be read as figures (shown as such, never a 500).
    unreadable: int = 0

    @property
    def outcomes(self) -> list[str]:
        seen = {outcome for counts in self.series.values() for outcome in counts}
        return [str(outcome) for outcome in PassOutcome if outcome in seen]


def window(since: datetime, until: datetime, step: timedelta) -> Window:
    """O1's figures of [*since*, *until*), in intervals of *step*.

    One read of the statistics rows of the window, summed per (minute, job,
    queue, outcome) -- what the unique key already holds, so the database
    reads one range of it -- then folded here into intervals and jobs.
    """
    rows = (
        PassStat.objects.using(router.db_for_read(PassStat))
        .filter(minute__gte=since, minute__lt=until)
        .values_list("minute", "job", "queue", "outcome")
        .annotate(
            n=Coalesce(Sum("count"), 0),
            total=Coalesce(Sum("total_seconds"), 0.0),
            longest=Coalesce(Max("max_seconds"), 0.0),
            **{name: Coalesce(Sum(name), 0) for name in BUCKET_FIELDS},
        )
        .order_by()
    )
    result = Window(since, until, step, {}, {}, {})
    valid = set(PassOutcome.values)
    series: dict[datetime, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for minute, job, queue, outcome, n, total, longest, *buckets in rows:
        if outcome not in valid or not _figures(n, total, longest, buckets):
            result.unreadable += 1
            continue
        start = since + ((minute - since) // step) * step
        series[start][outcome] += int(n)
        _add(result, (job, queue, outcome), int(n), float(total), float(longest), buckets)
    result.series = {start: dict(counts) for start, counts in sorted(series.items())}
    return result


def _add(  # noqa: PLR0917 - one statistics row's figures
    result: Window,
    key: tuple[str, str, str],
    n: int,
    total: float,
    longest: float,
    buckets: list[Any],
) -> None:
    """Fold one statistics row into its job's figures and its key's."""
    job, _queue, outcome = key
    counts = [*(int(b) for b in buckets), 0]
    counts[-1] = max(0, n - sum(counts))
    figures = result.jobs.setdefault(job, JobFigures(job))
    figures.passes += n
    figures.failures += n if outcome in FAILED_OUTCOMES else 0
    figures.seconds += total
    figures.longest = max(figures.longest, longest)
    figures.buckets = [a + b for a, b in zip(figures.buckets, counts, strict=True)]
    seen = result.by_key.get(key, (0, 0.0, [0] * len(counts)))
    merged = [a + b for a, b in zip(seen[2], counts, strict=True)]
    result.by_key[key] = (seen[0] + n, seen[1] + total, merged)


def _figures(n: Any, total: Any, longest: Any, buckets: list[Any]) -> bool:
    """Whether a row's figures are figures: counts whole and not negative, times finite."""
    try:
        counts = [int(n), *(int(b) for b in buckets)]
        times = [float(total), float(longest)]
    except (TypeError, ValueError, OverflowError):
        return False
    if any(c < 0 or c != float(c) for c in counts) or sum(counts[1:]) > counts[0]:
        return False
    return all(math.isfinite(t) and t >= 0 for t in times)


def percentile(buckets: list[int], share: float, longest: float) -> float | None:
    """The *share* quantile of a histogram (bucket counts by :data:`BUCKETS`, then +Inf).

    Linear within the bucket it falls in, as Prometheus's ``histogram_quantile``
    does; in the +Inf bucket, the longest pass seen. ``None`` for no passes.
    """
    total = sum(buckets)
    if not total:
        return None
    rank = share * total
    below = 0
    lower = 0.0
    for index, count in enumerate(buckets):
        if count and below + count >= rank:
            if index >= len(BUCKETS):
                return longest
            upper = BUCKETS[index]
            return lower + (upper - lower) * (rank - below) / count
        below += count
        lower = BUCKETS[index] if index < len(BUCKETS) else lower
    return longest


# -- for the overview (O4, O5) ---------------------------------------------------------------

#: The largest finite float: a figure past it (``inf``, PostgreSQL's ``NaN``) is no figure.
_FINITE_MAX = sys.float_info.max
#: The largest count a float holds exactly (2**53): past it :func:`_figures` finds a count
#: that is not a whole number of passes.
_COUNT_MAX = 2**53


def _readable() -> Q:
    """A statistics row whose figures are figures, as the database tests it.

    The test of :func:`window` (its outcome and :func:`_figures`), row by
    row: counts from 0 to 2**53, no more in the buckets than the count, times
    finite and not negative -- in a few comparisons a row (``LEAST`` /
    ``GREATEST`` of the counts and of the times; PostgreSQL's ``NaN`` is the
    greatest float). The buckets are summed as floats, so that a hand-edited
    row of huge counts cannot overflow the sum.
    """
    counts = [F("count"), *(F(name) for name in BUCKET_FIELDS)]
    times = [F("total_seconds"), F("max_seconds")]
    in_buckets = reduce(operator.add, (Cast(name, FloatField()) for name in BUCKET_FIELDS))
    return Q(
        Q(outcome__in=PassOutcome.values),
        GreaterThanOrEqual(Least(*counts), 0),
        LessThanOrEqual(Greatest(*counts), _COUNT_MAX),
        GreaterThanOrEqual(Least(*times), 0.0),
        LessThanOrEqual(Greatest(*times), _FINITE_MAX),
        GreaterThanOrEqual(Cast("count", FloatField()), in_buckets),
    )


def coarse_window(since: datetime, until: datetime, step: timedelta) -> Window:
    """:func:`window`'s figures, summed per interval of *step* by the database.

    For a day or a week, :func:`window`'s one row per (minute, job, queue,
    outcome) is tens of thousands of rows to fold here (a week of 5 jobs x 2
    outcomes is 100 800); the database sums them instead, so what comes back
    is a few hundred rows whatever the rate of passes. Two reads of the
    window's range of the statistics key, each testing a row at most once
    (:func:`_readable`, most of a read's cost):

    * per (job, queue, outcome) and readable or not: each key's figures, and
      the unreadable rows, counted row by row as :func:`window` counts them;
    * per interval, the passes of each outcome (a fixed vocabulary, so one
      filtered sum each): a ``UNION ALL`` of one aggregate per interval over
      its own range of the key, with no ``GROUP BY`` at all. (Grouped by an
      expression of the minute instead, PostgreSQL cannot tell how few the
      groups are and sorted the whole window, on disk past ``work_mem``:
      400 ms for a week, measured; SQLite built a temporary B-tree.) Only
      when the first read found unreadable rows does this one test each row.
    """
    table = PassStat.objects.using(router.db_for_read(PassStat))
    keys = (
        table.filter(minute__gte=since, minute__lt=until)
        .annotate(readable=ExpressionWrapper(_readable(), output_field=BooleanField()))
        .values_list("readable", "job", "queue", "outcome")
        .annotate(
            rows=Count("pk"),
            n=Coalesce(Sum("count"), 0),
            total=Coalesce(Sum("total_seconds"), 0.0),
            longest=Coalesce(Max("max_seconds"), 0.0),
            **{name: Coalesce(Sum(name), 0) for name in BUCKET_FIELDS},
        )
        .order_by()
    )
    result = Window(since, until, step, {}, {}, {})
    for readable, job, queue, outcome, rows, n, total, longest, *buckets in keys:
        if not readable or not _figures(n, total, longest, buckets):  # or a sum past a float
            result.unreadable += int(rows)
            continue
        _add(result, (job, queue, outcome), int(n), float(total), float(longest), buckets)
    # Each part reads its own range alone: beside the window's, SQLite would walk the
    # index by the window's range, once per interval.
    table = table.filter(_readable()) if result.unreadable else table
    edges = [since + n * step for n in range(max(1, math.ceil((until - since) / step)))]
    outcomes = list(PassOutcome.values)
    parts = [
        table.filter(minute__gte=start, minute__lt=min(start + step, until))
        .annotate(interval=Value(number))
        .values_list("interval")
        .annotate(**{f"n_{o}": Coalesce(Sum("count", filter=Q(outcome=o)), 0) for o in outcomes})
        .order_by()
        for number, start in enumerate(edges)
    ]
    series: dict[datetime, dict[str, int]] = {}
    for number, *counts in parts[0].union(*parts[1:], all=True) if parts[1:] else parts[0]:
        found = {outcome: int(n) for outcome, n in zip(outcomes, counts, strict=True) if n}
        if found:
            series[edges[int(number)]] = found
    result.series = {start: series[start] for start in sorted(series)}
    return result


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


#: How many of a job's newest runs are read for its last failure (O4): a bounded read.
FAILURE_SCAN = 200
#: The most characters of a last error read for the overview: its first line is shown.
ERROR_READ = 500


@dataclass(frozen=True)
class Failure:
    """A job's newest failed, held or retrying run: what the overview's per-job table shows."""

    run: str
    status: str
    code: str
    #: The first line of its last error, cut short.
    error: str


def last_failure(job: str, scan: int = FAILURE_SCAN) -> Failure | None:
    """The newest failed, held or retrying run among *job*'s newest *scan* runs (O4), or None.

    One read along the ``(job, id)`` index, newest first, of at most *scan*
    rows and only their short columns (the error cut to ``ERROR_READ``
    characters): a job with a million finished runs costs the same. A failure
    older than its newest *scan* runs is not found. A cancelled run is not a
    failure; a running one whose last pass failed (``failure_code`` set) is.
    Raises what the backend raises for a row it cannot read back (SPEC §12).
    """
    newest = (
        _runs()
        .filter(job=job)
        .order_by("-id")
        .values_list("id", "status", "failure_code", Left("last_error", ERROR_READ))[:scan]
    )
    for run, status, code, error in newest:
        failing = status in (RunStatus.FAILED, RunStatus.HELD)
        if failing or (status == RunStatus.RUNNING and code):
            first = (error or "").strip().split("\n", 1)[0]
            return Failure(str(run), str(status), str(code), first[:160])
    return None
