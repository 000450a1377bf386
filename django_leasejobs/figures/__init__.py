"""The work as a whole, read for the overview and the metrics view (SPEC §16: O2, O4, O5).

Two kinds of figures, each read by a few bounded queries:

* **Now**, from the runs themselves: each queue's due runs and how long its
  oldest due run has waited (:func:`queues`), and the runs that want an
  operator's eye -- held, stalled, throttled -- and the overdue schedules
  (:func:`attention`). Every read is a range of an index that leads with the
  run's status, so its cost tracks the live runs, never the retained history.
* **Over a window**, from the pass statistics the workers flush (O1):
  passes per interval by outcome, and per job its passes, failures and
  duration percentiles (:func:`window`). A statistics row that cannot be
  read as one -- a restore, a hand edit: an outcome outside the vocabulary,
  a negative or non-finite figure -- is counted apart as *unreadable*,
  never a 500.
* **For the overview** (O4, O5): the same window summed per interval by the
  database, for a day or a week, from the statistics' half-hours
  (:func:`coarse_window`; :func:`~.coarse.readable` is its test of a row); the queues the code
  names beside the busy ones (:func:`every_queue`); and a job's last failure,
  read from its newest runs alone (:func:`last_failure`).

One module each: :mod:`.now`, :mod:`.window`, :mod:`.coarse`, :mod:`.failures`.
"""

from __future__ import annotations

from .coarse import coarse_window
from .failures import ERROR_READ, FAILURE_SCAN, Failure, last_failure
from .now import (
    STALLED_SCAN_MAX,
    Attention,
    QueueFigures,
    attention,
    every_queue,
    named_queues,
    queues,
    stalled_before,
)
from .window import FAILED_OUTCOMES, JobFigures, Window, percentile, window

__all__ = [
    "ERROR_READ",
    "FAILED_OUTCOMES",
    "FAILURE_SCAN",
    "STALLED_SCAN_MAX",
    "Attention",
    "Failure",
    "JobFigures",
    "QueueFigures",
    "Window",
    "attention",
    "coarse_window",
    "every_queue",
    "last_failure",
    "named_queues",
    "percentile",
    "queues",
    "stalled_before",
    "window",
]
