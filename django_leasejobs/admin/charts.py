"""The overview's windows and charts (SPEC §16 O4): geometry in ``viewBox`` units.

A bar is a ``<rect>`` whose geometry is computed here and whose colour is a
class of ``leasejobs/overview.css`` -- the admin's CSS variables for text and
lines, outcome colours set for each of its themes -- so the templates draw
it as SVG with no script, no chart library and no network, in the admin's
dark mode too, and the ``viewBox`` scales it to a phone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils.dateformat import format as date_format
from django.utils.timezone import is_aware, localtime
from django.utils.translation import gettext_lazy as _

from django_leasejobs import figures

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
    #: How an interval's start is labelled (Django's date format).
    stamp: str


SPANS = {
    "hour": Span(
        "hour", _("Last hour"), timedelta(hours=1), timedelta(minutes=1), _("minute"), "H:i"
    ),
    "day": Span(
        "day", _("Last day"), timedelta(days=1), timedelta(minutes=30), _("30 minutes"), "H:i"
    ),
    "week": Span(
        "week", _("Last week"), timedelta(days=7), timedelta(hours=4), _("4 hours"), "D H:i"
    ),
}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def bounds(now: datetime, span: Span) -> tuple[datetime, datetime]:
    """[since, until) of *span*, ending with the interval *now* is in (on its step's UTC grid)."""
    epoch = _EPOCH if is_aware(now) else _EPOCH.replace(tzinfo=None)  # USE_TZ = False
    until = epoch + ((now - epoch) // span.step + 1) * span.step
    return until - span.length, until


WIDTH, HEIGHT, LEFT, TOP, BOTTOM = 720, 220, 48, 10, 24


def _stamp(moment: datetime, span: Span) -> str:
    """An interval's start as the page labels it, in the current time zone (if times are aware)."""
    return date_format(localtime(moment) if is_aware(moment) else moment, span.stamp)


def _nice(value: int) -> int:
    """The smallest of 1, 2, 5 x 10^k at least *value* (an axis's top)."""
    if value <= 1:
        return 1
    power = int(10 ** math.floor(math.log10(value)))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= value)


def passes_chart(win: figures.Window, span: Span) -> dict[str, Any]:
    """Chart (a): stacked bars of passes per interval by outcome, and its table's rows."""
    outcomes = win.outcomes
    count = max(1, round((win.until - win.since) / win.step))
    starts = [win.since + n * win.step for n in range(count)]
    totals = [sum(win.series.get(start, {}).values()) for start in starts]
    top = _nice(max(totals, default=0))
    plot_w, plot_h = WIDTH - LEFT - 8, HEIGHT - TOP - BOTTOM
    slot = plot_w / count
    bars, rows = [], []
    for n, start in enumerate(starts):
        counts = win.series.get(start, {})
        label = _stamp(start, span)
        base: float = TOP + plot_h
        for outcome in outcomes:
            value = counts.get(outcome, 0)
            if not value:
                continue
            height = plot_h * value / top
            base -= height
            bars.append(
                {
                    "x": round(LEFT + n * slot + slot * 0.1, 2),
                    "y": round(base, 2),
                    "width": round(slot * 0.8, 2),
                    "height": round(max(height, 0.5), 2),
                    "outcome": outcome,
                    "count": value,
                    "label": label,
                }
            )
        if totals[n]:
            rows.append(
                {"label": label, "counts": [counts.get(o, 0) for o in outcomes], "total": totals[n]}
            )
    every = max(1, count // 6)
    return {
        "width": WIDTH,
        "height": HEIGHT,
        "bars": bars,
        "rows": rows,
        "outcomes": outcomes,
        "total": sum(totals),
        "left": LEFT,
        "right": WIDTH - 8,
        "label_x": LEFT - 6,
        "stamp_y": HEIGHT - 6,
        "ticks": [
            {"y": round(TOP + plot_h * (1 - share), 2), "label": round(top * share)}
            for share in (0, 0.5, 1)
        ],
        "stamps": [
            {"x": round(LEFT + n * slot, 2), "label": _stamp(starts[n], span)}
            for n in range(0, count, every)
        ],
    }


ROW, LABEL_W = 30, 170


def seconds_text(value: float | None) -> str:
    if value is None:
        return "—"
    if value < 1:
        return f"{value * 1000:.3g} ms"
    return f"{value:.3g} s" if value < 120 else f"{value / 60:.3g} min"


def durations_chart(jobs: list[figures.JobFigures]) -> dict[str, Any]:
    """Chart (b): each job's p50 and p95 pass duration, on a log scale of seconds."""
    shown = [job for job in jobs if job.p95 is not None][:CHART_JOBS]
    values = [v for job in shown for v in (job.p50, job.p95) if v]
    low = min(1e-3, 10 ** math.floor(math.log10(min(values, default=1e-3))))
    high = max(1.0, 10 ** math.ceil(math.log10(max(values, default=1.0))))
    plot_w = WIDTH - LABEL_W - 16
    decades = math.log10(high) - math.log10(low)

    def x(value: float) -> float:
        share = (math.log10(max(value, low)) - math.log10(low)) / decades
        return round(LABEL_W + plot_w * share, 2)

    rows = []
    for n, job in enumerate(shown):
        y = TOP + n * ROW
        name = job.job if len(job.job) <= 24 else job.job[:23] + "…"
        rows.append(
            {
                "job": job.job,
                "name": name,
                "y": y,
                "text_y": y + 15,
                "p50": {
                    "y": y + 3,
                    "width": round(x(job.p50 or low) - LABEL_W, 2),
                    "value": seconds_text(job.p50),
                },
                "p95": {
                    "y": y + 14,
                    "width": round(x(job.p95 or low) - LABEL_W, 2),
                    "value": seconds_text(job.p95),
                },
            }
        )
    height = TOP + max(1, len(shown)) * ROW + BOTTOM
    ticks = [10.0**k for k in range(round(math.log10(low)), round(math.log10(high)) + 1)]
    return {
        "width": WIDTH,
        "height": height,
        "left": LABEL_W,
        "label_x": LABEL_W - 6,
        "top": TOP,
        "rows": rows,
        "shown": len(shown),
        "cut": len([job for job in jobs if job.p95 is not None]) > len(shown),
        "axis_y": height - BOTTOM + 4,
        "stamp_y": height - 6,
        "ticks": [{"x": x(t), "label": seconds_text(t)} for t in ticks],
    }
