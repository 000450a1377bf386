"""O1's figures over a day or a week, summed per interval by the database (SPEC §16: O4).

Read from the half-hours (:class:`~django_leasejobs.models.PassStatHalfHour`)
wherever the window and its intervals fall on the half-hour grid, as the
overview's day and week do: 336 rows a key for a week instead of 10 080
minutes. The flush writes both tables in one transaction, so the figures
are the minutes' (a test reads them both ways). Elsewhere, the minutes.
"""

from __future__ import annotations

import math
import operator
import sys
from datetime import datetime, timedelta
from functools import reduce
from typing import Any

from django.db import router
from django.db.models import (
    BooleanField,
    Case,
    Count,
    ExpressionWrapper,
    F,
    FloatField,
    IntegerField,
    Max,
    Q,
    QuerySet,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Cast, Coalesce, Greatest, Least
from django.db.models.lookups import GreaterThanOrEqual, LessThanOrEqual

from django_leasejobs.models import PassStat, PassStatHalfHour
from django_leasejobs.models.observability import BUCKET_FIELDS, PassFigures
from django_leasejobs.states import PassOutcome
from django_leasejobs.store.stats import HALF_HOUR, half_hour_of

from .window import Window, add, are_figures

__all__ = ["coarse_window", "readable"]

#: The largest finite float: a figure past it (``inf``, PostgreSQL's ``NaN``) is no figure.
_FINITE_MAX = sys.float_info.max
#: The largest count a float holds exactly (2**53): past it, :func:`~.window.are_figures`
#: finds a count that is not a whole number of passes.
_COUNT_MAX = 2**53


def readable() -> Q:
    """A statistics row whose figures are figures, as the database tests it.

    For a minute (:class:`~django_leasejobs.models.PassStat`) or a half-hour
    (:class:`~django_leasejobs.models.PassStatHalfHour`) alike: the columns
    it tests are theirs both. Migration 0010 sums only the minutes it passes.

    The test of :func:`window` (its outcome and :func:`~.window.are_figures`), row by
    row: counts from 0 to 2**53, no more in the buckets than the count, times
    finite and not negative -- in a few comparisons a row (``LEAST`` /
    ``GREATEST`` of the counts and of the times; PostgreSQL's ``NaN`` is the
    greatest float, and SQLite orders text and blobs after every number, so
    text in a number's column fails ``GREATEST(...) <= ...``). The buckets are
    summed as floats, so that a hand-edited row of huge counts cannot overflow
    the sum.
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


def coarse_window(
    since: datetime, until: datetime, step: timedelta, *, minutes: bool = False
) -> Window:
    """:func:`window`'s figures, summed per interval of *step* by the database.

    For a day or a week, :func:`window`'s one row per (minute, job, queue,
    outcome) is tens of thousands of rows to fold here (a week of 5 jobs x 2
    outcomes is 100 800); the database sums them instead, so what comes back
    is a few hundred rows whatever the rate of passes. Two reads of the
    window's range of the statistics key, each built once whatever the
    number of intervals: each key's figures (:func:`_fold_keys`), then the
    passes per interval and outcome (:func:`_series`), which tests each row
    (:func:`readable`) only when the first read found unreadable rows.

    The rows are the half-hours' when *since*, *until* and *step* fall on
    the half-hour grid (the overview's day and week), else the minutes', or
    the minutes' whatever the grid with *minutes*. The figures are the same
    either way; ``unreadable`` counts the rows read, half-hours or minutes.
    """
    model, moment = (
        (PassStat, "minute")
        if minutes or not _on_half_hours(since, until, step)
        else (PassStatHalfHour, "half_hour")
    )
    table = model.objects.using(router.db_for_read(model)).filter(
        **{f"{moment}__gte": since, f"{moment}__lt": until}
    )
    result = Window(since, until, step, {}, {}, {})
    _fold_keys(result, table)
    edges = [since + n * step for n in range(max(1, math.ceil((until - since) / step)))]
    rows = table.filter(readable()) if result.unreadable else table
    result.series = _series(rows, moment, edges)
    return result


def _on_half_hours(since: datetime, until: datetime, step: timedelta) -> bool:
    """Whether each interval is whole half-hours: no half-hour row straddles two, or an end."""
    whole = step >= HALF_HOUR and step % HALF_HOUR == timedelta(0)
    return whole and half_hour_of(since) == since and half_hour_of(until) == until


def _fold_keys(result: Window, table: QuerySet[PassFigures]) -> None:
    """Each (job, queue, outcome)'s figures, and the unreadable rows, as :func:`window` counts.

    Grouped by the key and by :func:`readable`, so each row is tested once
    (most of the read's cost). The longest times are read through a cast: in
    a group of unreadable SQLite rows, ``MAX`` of a text column is that text,
    which Django's float conversion would raise on.
    """
    keys = (
        table.annotate(readable=ExpressionWrapper(readable(), output_field=BooleanField()))
        .values_list("readable", "job", "queue", "outcome")
        .annotate(
            rows=Count("pk"),
            n=Coalesce(Sum("count"), 0),
            total=Coalesce(Sum("total_seconds"), 0.0),
            top=Coalesce(Max(Cast("total_seconds", FloatField())), 0.0),
            longest=Coalesce(Max(Cast("max_seconds", FloatField())), 0.0),
            **{name: Coalesce(Sum(name), 0) for name in BUCKET_FIELDS},
        )
        .order_by()
    )
    for fine, job, queue, outcome, rows, n, total, top, longest, *buckets in keys:
        if not fine or not are_figures(n, total, longest, buckets) or _past(total, top):
            result.unreadable += int(rows)
            continue
        add(result, (job, queue, outcome), int(n), float(total), float(longest), buckets)


def _past(total: Any, top: Any) -> bool:
    """Whether a sum of times went past a float.

    PostgreSQL refuses it, SQLite gives infinity (not figures), MariaDB gives
    0 -- less than one of the non-negative times it summed.
    """
    return float(total) < float(top)


def _series(
    rows: QuerySet[PassFigures], moment: str, edges: list[datetime]
) -> dict[datetime, dict[str, int]]:
    """Interval start -> outcome -> passes: one read grouped by (interval, outcome).

    The interval is a balanced tree of ``CASE`` on the row's *moment* (its
    minute or its half-hour, :func:`_interval`):
    built once, a handful of comparisons a row, the same SQL on every
    backend. Chosen by measurement, a week of 99 000 rows of 432 000 on
    PostgreSQL 15 (``benchmarks/overview_page.py``, 2026-12-03):

    * this read: PostgreSQL cannot tell how few the groups are (it guesses
      40 000, from the minutes), but each holds one sum, so it hashes them
      in memory -- 84 groups, 1.6 MB, 36-52 ms;
    * one sum per outcome (``FILTER``) grouped by the interval alone: eight
      sums a group make the guess too big to hash, so it sorted the window,
      on disk (3.4 MB), 140-170 ms; every figure grouped by the interval: on
      disk too, 17 MB, 200-300 ms;
    * per-minute sums folded into intervals here: 10 080 rows, 160-230 ms of
      Python;
    * the ``UNION ALL`` of one aggregate per interval this replaces: 70-98 ms
      to read, and building it cost the ORM more than the database took on
      an empty site (the page's day and week: 98 and 115 ms empty, 30 now).
    """
    grouped = (
        rows.annotate(interval=_interval(moment, edges, 0, len(edges)))
        .values_list("interval", "outcome")
        .annotate(n=Sum("count"))
        .order_by()
    )
    series: dict[datetime, dict[str, int]] = {}
    for number, outcome, n in grouped:
        if n:
            series.setdefault(edges[int(number)], {})[outcome] = int(n)
    return {start: series[start] for start in sorted(series)}


def _interval(moment: str, edges: list[datetime], low: int, high: int) -> Any:
    """The number of the interval among ``edges[low:high]`` a row's *moment* falls in.

    Halves the edges at each ``CASE``: log2 of the intervals' number comparisons
    a row (six for a day's 48), where a flat ``CASE`` would make half as many
    comparisons as intervals.
    """
    if high - low == 1:
        return Value(low)
    middle = (low + high) // 2
    return Case(
        When(**{f"{moment}__lt": edges[middle]}, then=_interval(moment, edges, low, middle)),
        default=_interval(moment, edges, middle, high),
        output_field=IntegerField(),
    )
