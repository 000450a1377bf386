"""Prometheus metrics (SPEC §16 O2): the work as a whole at scrape time, and a worker's own.

Two registries, for two kinds of scrape:

* **The site's figures** (:func:`exposition`, served by
  :func:`django_leasejobs.views.metrics`): gauges read when Prometheus
  scrapes, by the bounded, indexed reads of :mod:`.figures` -- due runs and
  the age of the oldest per queue, paused queues, live runs per status,
  held, stalled and throttled runs, overdue schedules -- and O1's pass
  statistics of the last :data:`WINDOW`, per job, queue and outcome, with
  their durations as a histogram. Every process of the site answers the
  same, so any web process may be scraped.
* **A worker's own counters** (:class:`WorkerMetrics`, served by
  ``rundueJobs --metrics-port``): the passes this process ran, their
  durations, the claims it lost to other workers, its throttled passes and
  the database connections it holds. Counted in memory as the drive tallies
  each pass (:data:`.stats.observers`); a scrape reads no database.

Labels are the job, the queue, the outcome and the status: a handful of
values each. Never a run id, an instance, a payload or a limit key -- one
series per run would grow Prometheus's memory with every run ever started.
Import this module only once ``prometheus_client`` is known to be there.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import Collector

from . import figures, stats
from .clock import get_clock
from .errors import describe
from .models import Run
from .models.observability import BUCKETS
from .states import UNTIMED_OUTCOMES, PassOutcome, RunStatus

__all__ = ["WINDOW", "FiguresCollector", "WorkerMetrics", "exposition", "serve_worker_metrics"]

logger = logging.getLogger("django_leasejobs")

#: How far back the pass statistics exposed by the view reach (O2).
WINDOW = timedelta(minutes=15)
_MINUTE = timedelta(minutes=1)


# -- the site's figures, read at scrape time ---------------------------------------------------


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
            "Running runs live longer than their job's stall_after (S6), counted among at "
            f"most the {figures.STALLED_SCAN_MAX} oldest.",
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
        labels=["job", "queue", "outcome"],
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
        labels=["job", "queue"],
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


# -- a worker's own counters ------------------------------------------------------------------


class OpenConnections:
    """The database connections this process holds open, whichever thread opened them.

    Django's connections are per thread, so no thread can list another's.
    Each connection opened is noted (Django's ``connection_created`` signal)
    -- the drive's own, each pass thread's (W5), each heartbeat's (L10), the
    LISTEN connection (W2), and any a handler opens on its own thread -- and
    a scrape counts those still open. A connection whose thread has ended is
    forgotten with it (weak references).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: weakref.WeakSet[BaseDatabaseWrapper] = weakref.WeakSet()
        self._uid = f"django_leasejobs.metrics.OpenConnections-{id(self)}"

    def start(self) -> None:
        """Note the connections this thread has open already, and each one opened from now."""
        connection_created.connect(self._opened, weak=False, dispatch_uid=self._uid)
        with self._lock:
            for wrapper in connections.all(initialized_only=True):
                self._seen.add(wrapper)

    def stop(self) -> None:
        connection_created.disconnect(dispatch_uid=self._uid)

    def _opened(self, sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
        with self._lock:
            self._seen.add(connection)

    def count(self) -> int:
        with self._lock:
            wrappers = list(self._seen)
        return sum(1 for wrapper in wrappers if wrapper.connection is not None)


class WorkerMetrics:
    """One worker process's counters, histograms and gauges, on a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.passes = Counter(
            "leasejobs_passes",
            "Passes this process ran, per job, queue and outcome (as the drive report counts "
            "them).",
            ["job", "queue", "outcome"],
            registry=self.registry,
        )
        self.pass_seconds = Histogram(
            "leasejobs_pass_seconds",
            "Durations of the passes this process ran, per job and queue, in seconds.",
            ["job", "queue"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.claims_lost = Counter(
            "leasejobs_claims_lost",
            "Claims this process found taken by another worker (its drive then moves on).",
            registry=self.registry,
        )
        self.throttled = Counter(
            "leasejobs_throttled_passes",
            "Passes of this process that found their job's limit reached and ran nothing.",
            registry=self.registry,
        )
        self.connections = OpenConnections()
        Gauge(
            "leasejobs_database_connections",
            "Database connections this process holds open (the drive's, the pass threads', "
            "heartbeats', LISTEN).",
            registry=self.registry,
        ).set_function(self.connections.count)

    def observe(self, job: str, queue: str, outcome: str, seconds: float) -> None:
        """One pass the drive counted (a :data:`.stats.observers` hook); never raises."""
        try:
            self.passes.labels(job, queue, outcome).inc()
            self.pass_seconds.labels(job, queue).observe(max(0.0, seconds))
            if outcome == PassOutcome.THROTTLED:
                self.throttled.inc()
        except Exception as exc:  # the metrics are an extra: never a drive's failure
            logger.warning("Worker metrics did not count a pass (%s)", describe(exc))

    def lost(self) -> None:
        """One claim lost to another worker (a :data:`.stats.lost_observers` hook)."""
        self.claims_lost.inc()

    def install(self) -> None:
        """Count from now on: hook into the drive's tally and note connections."""
        self.connections.start()
        stats.observers.append(self.observe)
        stats.lost_observers.append(self.lost)

    def uninstall(self) -> None:
        """Stop counting (the server is stopping)."""
        if self.observe in stats.observers:
            stats.observers.remove(self.observe)
        if self.lost in stats.lost_observers:
            stats.lost_observers.remove(self.lost)
        self.connections.stop()


def serve_worker_metrics(port: int, address: str) -> Callable[[], None]:
    """Serve this process's :class:`WorkerMetrics` on *address*:*port*; return the stop.

    Raises ``OSError`` when the port cannot be bound (in use, a bad address),
    before anything is counted.
    """
    worker = WorkerMetrics()
    server, thread = start_http_server(port, addr=address, registry=worker.registry)
    worker.install()

    def stop() -> None:
        worker.uninstall()
        server.shutdown()
        server.server_close()
        thread.join()

    return stop
