"""O1's figures over a window: passes per interval by outcome, and per job (SPEC §16: O2, O4).

Read from the pass statistics the workers flush. A statistics row that
cannot be read as one -- a restore, a hand edit: an outcome outside the
vocabulary, a negative or non-finite figure, text where a number belongs
(SQLite keeps what it is given) -- is counted apart as *unreadable*, never
a 500 and never a silent zero. A pass in which no handler ran
(:data:`~django_leasejobs.states.UNTIMED_OUTCOMES`: a held takeover, a
throttled pass) counts as a pass, never in the durations.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import router

from django_leasejobs.models import PassStat
from django_leasejobs.models.observability import BUCKET_FIELDS, BUCKETS
from django_leasejobs.states import UNTIMED_OUTCOMES, PassOutcome

__all__ = ["FAILED_OUTCOMES", "JobFigures", "Window", "add", "are_figures", "percentile", "window"]

#: Outcomes that are a failed pass: what the failure rate counts.
FAILED_OUTCOMES = frozenset({PassOutcome.RETRYING, PassOutcome.FAILED, PassOutcome.HELD})


@dataclass
class JobFigures:
    """One job over a window: its passes, failures and durations (O4's per-job table).

    ``seconds``, ``longest`` and ``buckets`` are the timed passes' alone: a
    pass that ran no handler is in ``passes`` (and ``failures``, if held) only.
    """

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
    #: (job, queue, outcome) -> passes, their seconds and bucket counts: what O2 exposes
    #: (the seconds and buckets of an untimed outcome are bookkeeping: never a duration).
    by_key: dict[tuple[str, str, str], tuple[int, float, list[int]]]
    #: Statistics rows that could not be read as figures (shown as such, never a 500).
    unreadable: int = 0

    @property
    def outcomes(self) -> list[str]:
        seen = {outcome for counts in self.series.values() for outcome in counts}
        return [str(outcome) for outcome in PassOutcome if outcome in seen]


def window(since: datetime, until: datetime, step: timedelta) -> Window:
    """O1's figures of [*since*, *until*), in intervals of *step*.

    One read of the window's range of the statistics key, each row as
    stored: the key is unique, so a row is already one (minute, job, queue,
    outcome). Folded here into intervals and jobs. Read as stored, not
    summed, so that a figure the database cannot add -- text in a number's
    column -- reaches :func:`are_figures` as what it is: ``SUM`` would read
    it as 0, ``MAX`` hand it to a float conversion that raises.
    """
    rows = (
        PassStat.objects.using(router.db_for_read(PassStat))
        .filter(minute__gte=since, minute__lt=until)
        .values_list(
            "minute",
            "job",
            "queue",
            "outcome",
            "count",
            "total_seconds",
            "max_seconds",
            *BUCKET_FIELDS,
        )
        .order_by()
    )
    result = Window(since, until, step, {}, {}, {})
    valid = set(PassOutcome.values)
    series: dict[datetime, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for minute, job, queue, outcome, n, total, longest, *buckets in rows:
        if outcome not in valid or not are_figures(n, total, longest, buckets):
            result.unreadable += 1
            continue
        start = since + ((minute - since) // step) * step
        series[start][outcome] += int(n)
        add(result, (job, queue, outcome), int(n), float(total), float(longest), buckets)
    result.series = {start: dict(counts) for start, counts in sorted(series.items())}
    return result


def add(  # noqa: PLR0917 - one statistics row's figures
    result: Window,
    key: tuple[str, str, str],
    n: int,
    total: float,
    longest: float,
    buckets: list[Any],
) -> None:
    """Fold one statistics row into its job's figures and its key's.

    An untimed outcome's passes count, its durations do not: they are the
    bookkeeping of a pass that ran nothing (a held takeover's 2 ms would
    read as a fast pass in the job's p50).
    """
    job, _queue, outcome = key
    counts = [*(int(b) for b in buckets), 0]
    counts[-1] = max(0, n - sum(counts))
    figures = result.jobs.setdefault(job, JobFigures(job))
    figures.passes += n
    figures.failures += n if outcome in FAILED_OUTCOMES else 0
    if outcome not in UNTIMED_OUTCOMES:
        figures.seconds += total
        figures.longest = max(figures.longest, longest)
        figures.buckets = [a + b for a, b in zip(figures.buckets, counts, strict=True)]
    seen = result.by_key.get(key, (0, 0.0, [0] * len(counts)))
    merged = [a + b for a, b in zip(seen[2], counts, strict=True)]
    result.by_key[key] = (seen[0] + n, seen[1] + total, merged)


def are_figures(n: Any, total: Any, longest: Any, buckets: list[Any]) -> bool:
    """Whether a row's figures are figures: numbers, counts whole and not negative, times finite.

    A number, not what reads as one: SQLite keeps the text it cannot convert
    (``'abc'``, ``''``) in a number's column, as text.
    """
    if not all(_is_number(value) for value in (n, total, longest, *buckets)):
        return False
    try:
        counts = [int(n), *(int(b) for b in buckets)]
        times = [float(total), float(longest)]
    except (TypeError, ValueError, OverflowError):
        return False
    if any(c < 0 or c != float(c) for c in counts) or sum(counts[1:]) > counts[0]:
        return False
    return all(math.isfinite(t) and t >= 0 for t in times)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


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
