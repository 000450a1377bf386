"""Prometheus metrics (SPEC §16 O2): the work as a whole at scrape time, and a worker's own.

Two registries, for two kinds of scrape:

* **The site's figures** (:func:`exposition`, served by
  :func:`django_leasejobs.views.metrics`; :mod:`.scrape`): gauges read when
  Prometheus scrapes, by the bounded, indexed reads of
  :mod:`django_leasejobs.figures` -- due runs and the age of the oldest per
  queue, paused queues, live runs per status, held, stalled and throttled
  runs, overdue schedules -- and O1's pass statistics of the last
  :data:`WINDOW`, per job, queue and outcome, with their durations as a
  histogram. Every process of the site answers the same, so any web process
  may be scraped.
* **A worker's own counters** (:class:`WorkerMetrics`, served by
  ``rundueJobs --metrics-port``; :mod:`.process`): the passes this process
  ran, their durations, the claims it lost to other workers, its throttled
  passes and the database connections it holds (:mod:`.connections`).
  Counted in memory as the drive tallies each pass
  (:data:`django_leasejobs.stats.observers`); a scrape reads no database.

Labels are the job (:data:`JOB_LABEL`, ``job_name``), the queue, the
outcome and the status: a handful of values each. Never a run id, an
instance, a payload or a limit key -- one series per run would grow
Prometheus's memory with every run ever started. Import this package only
once ``prometheus_client`` is known to be there.
"""

from __future__ import annotations

from .connections import OpenConnections
from .labels import JOB_LABEL
from .process import WorkerMetrics, serve_worker_metrics
from .scrape import WINDOW, FiguresCollector, exposition

__all__ = [
    "JOB_LABEL",
    "WINDOW",
    "FiguresCollector",
    "OpenConnections",
    "WorkerMetrics",
    "exposition",
    "serve_worker_metrics",
]
