"""O1's figures over a day or a week, summed per interval by the database (SPEC §16: O4)."""

from __future__ import annotations

import math
import operator
import sys
from datetime import datetime, timedelta
from functools import reduce

from django.db import router
from django.db.models import (
    BooleanField,
    Count,
    ExpressionWrapper,
    F,
    FloatField,
    Max,
    Q,
    Sum,
    Value,
)
from django.db.models.functions import Cast, Coalesce, Greatest, Least
from django.db.models.lookups import GreaterThanOrEqual, LessThanOrEqual

from django_leasejobs.models import PassStat
from django_leasejobs.models.observability import BUCKET_FIELDS
from django_leasejobs.states import PassOutcome

from .window import Window, add, are_figures

__all__ = ["coarse_window"]

#: The largest finite float: a figure past it (``inf``, PostgreSQL's ``NaN``) is no figure.
_FINITE_MAX = sys.float_info.max
#: The largest count a float holds exactly (2**53): past it, :func:`~.window.are_figures`
#: finds a count that is not a whole number of passes.
_COUNT_MAX = 2**53


def _readable() -> Q:
    """A statistics row whose figures are figures, as the database tests it.

    The test of :func:`window` (its outcome and :func:`~.window.are_figures`), row by
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
            top=Coalesce(Max("total_seconds"), 0.0),
            longest=Coalesce(Max("max_seconds"), 0.0),
            **{name: Coalesce(Sum(name), 0) for name in BUCKET_FIELDS},
        )
        .order_by()
    )
    result = Window(since, until, step, {}, {}, {})
    for readable, job, queue, outcome, rows, n, total, top, longest, *buckets in keys:
        # A sum past a float: PostgreSQL refuses it, SQLite gives infinity (not figures),
        # MariaDB gives 0 -- less than one of the non-negative times it summed.
        summed_past = float(total) < float(top)
        if not readable or summed_past or not are_figures(n, total, longest, buckets):
            result.unreadable += int(rows)
            continue
        add(result, (job, queue, outcome), int(n), float(total), float(longest), buckets)
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
