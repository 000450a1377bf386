"""The overview's windows and charts (SPEC §16 O4, A8): geometry in per cent and pixels.

A bar is a ``<rect>`` whose geometry is computed here and whose colour is a
class of ``leasejobs/overview.css`` -- the admin's CSS variables for text and
lines, outcome colours set for each of its themes -- so the templates draw
it as SVG with no script, no chart library and no network, in the admin's
dark mode too.

The charts have no ``viewBox``: across they are laid out in per cent of their
width, down in pixels, so a phone's narrow screen narrows the bars and never
shrinks the text (A8: chart labels stay at their CSS size, 11 px and up,
where a 720-unit drawing scaled to 340 px had drawn them at 6). So that no
label needs a margin the width cannot spare, a duration chart's job names
stand above their bars, and the passes chart's counts sit on their grid
lines. Times on the axis are in the site's zone, named in the caption
(:mod:`django_leasejobs.times`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils.timezone import is_aware
from django.utils.translation import gettext_lazy as _

from django_leasejobs import figures
from django_leasejobs.times import axis_stamp, duration

__all__ = [
    "CHART_JOBS",
    "SPANS",
    "Span",
    "bounds",
    "durations_chart",
    "passes_chart",
    "seconds_text",
]

#: The most jobs the duration chart draws (the busiest); the table lists them all.
CHART_JOBS = 20


@dataclass(frozen=True)
class Span:
    """A window the overview offers: how long, in intervals of what, labelled how."""

    key: str
    label: Any
    length: timedelta
    step: timedelta
    per: Any
    #: Whether an interval's label names its day (``Thu 16:00``), over a week.
    weekday: bool = False


SPANS = {
    "hour": Span("hour", _("Last hour"), timedelta(hours=1), timedelta(minutes=1), _("minute")),
    "day": Span("day", _("Last day"), timedelta(days=1), timedelta(minutes=30), _("30 minutes")),
    "week": Span(
        "week", _("Last week"), timedelta(days=7), timedelta(hours=4), _("4 hours"), weekday=True
    ),
}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def bounds(now: datetime, span: Span) -> tuple[datetime, datetime]:
    """[since, until) of *span*, ending with the interval *now* is in (on its step's UTC grid)."""
    epoch = _EPOCH if is_aware(now) else _EPOCH.replace(tzinfo=None)  # USE_TZ = False
    until = epoch + ((now - epoch) // span.step + 1) * span.step
    return until - span.length, until


#: The passes chart, in pixels down: its height, and the room above and below the plot.
HEIGHT, TOP, BOTTOM = 220, 16, 24
#: The share of the width after which no time is labelled: the label would run off the edge.
STAMPS_UNTIL = 0.8


def _pct(share: float) -> float:
    return round(share * 100, 3)


def passes_chart(win: figures.Window, span: Span) -> dict[str, Any]:
    """Chart (a): stacked bars of passes per interval by outcome, and its table's rows."""
    outcomes = win.outcomes
    count = max(1, round((win.until - win.since) / win.step))
    starts = [win.since + n * win.step for n in range(count)]
    labels = [axis_stamp(start, weekday=span.weekday) for start in starts]
    totals = [sum(win.series.get(start, {}).values()) for start in starts]
    top = _nice(max(totals, default=0))
    plot_h = HEIGHT - TOP - BOTTOM
    slot = 1 / count
    bars, rows = [], []
    for n, start in enumerate(starts):
        counts = win.series.get(start, {})
        base: float = TOP + plot_h
        for outcome in outcomes:
            value = counts.get(outcome, 0)
            if not value:
                continue
            height = plot_h * value / top
            base -= height
            bars.append(
                {
                    "x": _pct(n * slot + slot * 0.1),
                    "y": round(base, 2),
                    "width": _pct(slot * 0.8),
                    "height": round(max(height, 0.5), 2),
                    "outcome": outcome,
                    "count": value,
                    "label": labels[n],
                }
            )
        if totals[n]:
            rows.append(
                {
                    "label": labels[n],
                    "counts": [counts.get(o, 0) for o in outcomes],
                    "total": totals[n],
                }
            )
    every = math.ceil(count / (5 if span.weekday else 6))
    return {
        "height": HEIGHT,
        "bars": bars,
        "rows": rows,
        "outcomes": outcomes,
        "total": sum(totals),
        "ticks": [
            {"y": round(TOP + plot_h * (1 - share), 2), "label": round(top * share)}
            for share in (0, 0.5, 1)
        ],
        "stamp_y": HEIGHT - 6,
        "stamps": [
            {"x": _pct(n * slot), "label": labels[n]}
            for n in range(0, count, every)
            if n * slot <= STAMPS_UNTIL
        ],
    }


def _nice(value: int) -> int:
    """The smallest of 1, 2, 5 x 10^k at least *value* (an axis's top)."""
    if value <= 1:
        return 1
    power = int(10 ** math.floor(math.log10(value)))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= value)


#: The duration chart: a job's row in pixels, its name above its two bars; the axis below.
ROW, NAME_Y, P50_Y, P95_Y, BAR_H, AXIS_H = 40, 14, 19, 29, 8, 24
#: The durations an axis marks, where they fall within it: whole units, as :func:`duration`.
TICKS = (0.001, 0.01, 0.1, 1.0, 10.0, 60.0, 600.0, 3600.0, 36_000.0, 86_400.0)
#: The longest job name drawn whole; the table beside has every name in full.
NAME_MAX = 40


def seconds_text(value: float | None) -> str:
    """A pass duration as the page writes every duration: ``35.7 ms``, ``7.5 s``, ``2 min``."""
    return "—" if value is None else duration(value)


def durations_chart(jobs: list[figures.JobFigures]) -> dict[str, Any]:
    """Chart (b): each job's p50 and p95 pass duration, on a log scale of seconds."""
    shown = [job for job in jobs if job.p95 is not None][:CHART_JOBS]
    values = [v for job in shown for v in (job.p50, job.p95) if v]
    low = min(1e-3, 10 ** math.floor(math.log10(min(values, default=1e-3))))
    high = max(1.0, 10 ** math.ceil(math.log10(max(values, default=1.0))))
    decades = math.log10(high) - math.log10(low)

    def share(value: float) -> float:
        return (math.log10(min(max(value, low), high)) - math.log10(low)) / decades

    rows = []
    for n, job in enumerate(shown):
        y = n * ROW
        name = job.job if len(job.job) <= NAME_MAX else job.job[: NAME_MAX - 1] + "…"
        rows.append(
            {
                "job": job.job,
                "name": name,
                "text_y": y + NAME_Y,
                "p50": {
                    "y": y + P50_Y,
                    "width": _pct(max(share(job.p50 or low), 0.005)),
                    "value": seconds_text(job.p50),
                },
                "p95": {
                    "y": y + P95_Y,
                    "width": _pct(max(share(job.p95 or low), 0.005)),
                    "value": seconds_text(job.p95),
                },
            }
        )
    plot_h = max(1, len(shown)) * ROW
    marks = [t for t in TICKS if low <= t <= high]
    return {
        "height": plot_h + AXIS_H,
        "rows": rows,
        "shown": len(shown),
        "cut": len([job for job in jobs if job.p95 is not None]) > len(shown),
        "axis_y": plot_h + 4,
        "stamp_y": plot_h + AXIS_H - 6,
        "ticks": [
            {
                "x": _pct(share(t)),
                "label": seconds_text(t),
                # The first and last labels stay inside the chart's edges.
                "anchor": "start" if share(t) < 0.05 else "end" if share(t) > 0.95 else "middle",
            }
            for t in marks
        ],
    }
