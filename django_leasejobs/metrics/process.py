"""A worker process's own counters, served by ``rundueJobs --metrics-port`` (O2)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import start_http_server

from django_leasejobs import stats
from django_leasejobs.errors import describe
from django_leasejobs.models.observability import BUCKETS
from django_leasejobs.states import PassOutcome

from .connections import OpenConnections

__all__ = ["WorkerMetrics", "serve_worker_metrics"]

logger = logging.getLogger("django_leasejobs")


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
