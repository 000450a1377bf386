"""A worker process's own counters, served by ``rundueJobs --metrics-port`` (O2)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import start_http_server

from django_leasejobs import stats
from django_leasejobs.contained import contained
from django_leasejobs.known import TASK_JOB
from django_leasejobs.models.observability import BUCKETS
from django_leasejobs.registry import registry
from django_leasejobs.states import UNTIMED_OUTCOMES, PassOutcome

from .connections import OpenConnections
from .labels import JOB_LABEL

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
            [JOB_LABEL, "queue", "outcome"],
            registry=self.registry,
        )
        self.pass_seconds = Histogram(
            "leasejobs_pass_seconds",
            "Durations of the passes this process ran in which a handler ran (never a held or "
            "throttled one), per job and queue, in seconds.",
            [JOB_LABEL, "queue"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.claims_lost = Counter(
            "leasejobs_claims_lost",
            "Claims this process lost because another worker process claimed the run first "
            "(its drive then moves on). One process alone never raises it, whatever its "
            "concurrency, and throttled, paused or deferred runs never do.",
            registry=self.registry,
        )
        self.throttled = Counter(
            "leasejobs_throttled_passes",
            "Passes of this process that found their job's limit reached and ran nothing.",
            registry=self.registry,
        )
        #: The (job, queue) pairs whose series exist: each at 0 from the first time it is seen.
        #: Written by the drive's thread alone, which tallies every pass (W5).
        self.seen: set[tuple[str, str]] = set()
        self.connections = OpenConnections()
        Gauge(
            "leasejobs_database_connections",
            "Database connections this process holds open (the drive's, the pass threads', "
            "heartbeats', LISTEN).",
            registry=self.registry,
        ).set_function(self.connections.count)

    def observe(self, job: str, queue: str, outcome: str, seconds: float) -> None:
        """One pass the drive counted (a :data:`.stats.observers` hook); never raises.

        A held or throttled pass ran no handler: it is counted, but its
        milliseconds of bookkeeping would read as a fast pass in every
        percentile, so it is not timed. A *job* and *queue* not seen before --
        a task's path, a job's run started in another queue -- first get
        every series at 0 (:meth:`zero_series`).
        """
        with contained("Worker metrics"):  # an extra: never a drive's failure (F12)
            if (job, queue) not in self.seen:
                self.zero_series(job, queue)
            self.passes.labels(job, queue, outcome).inc()
            if outcome not in UNTIMED_OUTCOMES:
                self.pass_seconds.labels(job, queue).observe(max(0.0, seconds))
            if outcome == PassOutcome.THROTTLED:
                self.throttled.inc()

    def lost(self) -> None:
        """One claim lost to another worker (a :data:`.stats.lost_observers` hook); never raises."""
        with contained("Worker metrics"):
            self.claims_lost.inc()

    def zero(self) -> None:
        """Create, at 0, every series this process can count for the jobs registered here.

        ``increase()`` and ``rate()`` read a series born at 1 -- a job's first
        failure in this process's life -- as no increase at all: the series
        must exist at 0 in an earlier scrape (O2, revision 4). Each outcome in
        the job's own queue. A task run is counted under its task's path
        (:func:`~django_leasejobs.known.known_as`), which no process knows
        before its first pass, and a job's run may be started in another
        queue: those get their series at 0 when first seen (:meth:`observe`),
        so only that first pass's own outcome begins at 1 -- which is why the
        shipped failure alert also reads the view's ``leasejobs_passes_15m``.
        """
        for spec in registry:
            if spec.name != TASK_JOB:
                self.zero_series(spec.name, spec.queue)

    def zero_series(self, job: str, queue: str) -> None:
        """Create, at 0, each outcome's series of *job* in *queue*, and its durations'."""
        for outcome in PassOutcome:
            self.passes.labels(job, queue, outcome)
        self.pass_seconds.labels(job, queue)
        self.seen.add((job, queue))

    def install(self) -> None:
        """Count from now on: the jobs' series at 0, the drive's tally hooked, connections noted."""
        self.zero()
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
