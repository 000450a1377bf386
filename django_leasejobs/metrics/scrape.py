"""The site's figures, read at scrape time: what :func:`django_leasejobs.views.metrics` answers."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db import router
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from django_leasejobs import figures
from django_leasejobs.clock import get_clock
from django_leasejobs.models import Run
from django_leasejobs.models.observability import BUCKETS
from django_leasejobs.states import UNTIMED_OUTCOMES, RunStatus

from .labels import JOB_LABEL

__all__ = ["WINDOW", "FiguresCollector", "exposition"]

#: How far back the pass statistics exposed by the view reach (O2).
WINDOW = timedelta(minutes=15)
_MINUTE = timedelta(minutes=1)


class FiguresCollector(Collector):
    """The figures of :mod:`.figures`, read afresh at each :meth:`collect` (one scrape)."""

    def describe(self) -> Iterable[Metric]:
        """Nothing: registering the collector must not read the database."""
        return []

    def collect(self) -> Iterable[Metric]:
        """Read the figures now; a database error propagates (the view answers 503)."""
        now = get_clock().now(router.db_for_read(Run))
        return [*_queue_families(now), *_attention_families(now), *_window_families(now)]


def _queue_families(now: datetime) -> list[Metric]:
    due = GaugeMetricFamily(
        "leasejobs_due_runs",
        "Runs due now: live, their next attempt time passed, per queue.",
        labels=["queue"],
    )
    oldest = GaugeMetricFamily(
        "leasejobs_oldest_due_seconds",
        "How long the oldest due run of each queue has been due, in seconds (0: none due).",
        labels=["queue"],
    )
    paused = GaugeMetricFamily(
        "leasejobs_queue_paused",
        "1 while the queue is paused (no worker begins a pass of its runs, W6), else 0.",
        labels=["queue"],
    )
    for queue in figures.queues(now):
        due.add_metric([queue.queue], queue.due)
        oldest.add_metric([queue.queue], queue.oldest_due_seconds or 0.0)
        paused.add_metric([queue.queue], 0 if queue.paused is None else 1)
    return [due, oldest, paused]


def _attention_families(now: datetime) -> list[Metric]:
    seen = figures.attention(now)
    live = GaugeMetricFamily(
        "leasejobs_live_runs", "Live runs (holding their key), per status.", labels=["status"]
    )
    for status in (RunStatus.RUNNING, RunStatus.HELD):
        live.add_metric([str(status)], seen.live.get(str(status), 0))
    singles = (
        ("leasejobs_held_runs", "Runs held for an operator (L3).", seen.held),
        (
            "leasejobs_stalled_runs",
            "How many running runs have been live longer than their job's stall_after (S6), "
            f"counted among at most the {figures.STALLED_SCAN_MAX} oldest.",
            seen.stalled,
        ),
        (
            "leasejobs_throttled_runs",
            "Running runs waiting for their job's limit (C2, C3), not leased.",
            seen.throttled,
        ),
        (
            "leasejobs_overdue_schedules",
            "Enabled schedules that read as stalled or missed (S6).",
            seen.overdue,
        ),
    )
    return [live, *(GaugeMetricFamily(name, text, value=value) for name, text, value in singles)]


def _window_families(now: datetime) -> list[Metric]:
    """O1's figures of the last :data:`WINDOW`: whole minutes, the current one included."""
    until = now.replace(second=0, microsecond=0) + _MINUTE
    read = figures.window(until - WINDOW, until, WINDOW)
    passes = GaugeMetricFamily(
        "leasejobs_passes_15m",
        "Passes that ended in the last 15 minutes, per job, queue and outcome (from O1's "
        "statistics, every worker's).",
        labels=[JOB_LABEL, "queue", "outcome"],
    )
    durations: dict[tuple[str, str], tuple[int, float, list[int]]] = {}
    for (job, queue, outcome), (n, total, buckets) in sorted(read.by_key.items()):
        passes.add_metric([job, queue, outcome], n)
        if outcome in UNTIMED_OUTCOMES:
            continue  # no handler ran: a pass, never a duration (O1)
        seen = durations.get((job, queue), (0, 0.0, [0] * len(buckets)))
        merged = [a + b for a, b in zip(seen[2], buckets, strict=True)]
        durations[(job, queue)] = (seen[0] + n, seen[1] + total, merged)
    seconds = HistogramMetricFamily(
        "leasejobs_pass_seconds_15m",
        "Durations of the passes that ended in the last 15 minutes, per job and queue, in "
        "seconds (a histogram of the window: read it without rate()).",
        labels=[JOB_LABEL, "queue"],
    )
    for (job, queue), (n, total, buckets) in durations.items():
        seconds.add_metric([job, queue], _cumulative(buckets, n), sum_value=total)
    unreadable = GaugeMetricFamily(
        "leasejobs_unreadable_stat_rows_15m",
        "Pass statistics rows of the last 15 minutes that could not be read as figures (a "
        "restore, a hand edit) and were left out.",
        value=read.unreadable,
    )
    return [passes, seconds, unreadable]


def _cumulative(buckets: list[int], count: int) -> list[tuple[str, float]]:
    """Per-bucket counts (by :data:`BUCKETS`, then past the last) as Prometheus's ``le`` series."""
    series: list[tuple[str, float]] = []
    below = 0
    for bound, n in zip(BUCKETS, buckets, strict=False):
        below += n
        series.append((str(float(bound)), below))  # as Histogram writes le: 0.005, 1.0
    series.append(("+Inf", count))
    return series


def exposition() -> bytes:
    """The site's figures in the Prometheus text format, read now (what the view answers)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FiguresCollector())
    return generate_latest(registry)
