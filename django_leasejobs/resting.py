"""When a worker or a one-shot command drives again after a drive that found nothing (W1, W3).

A ``--loop`` worker rests, and ``--max-seconds`` waits, until the earliest
time a run it may drive falls due -- a retry's back-off, a ``Defer``, a
``run_after``, a throttled run's release (C2, C3) -- not a whole interval,
nor the next cron minute: :func:`due_in` reads that time.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from django.db import router
from django.db.models import Max, Min

from . import driver
from .clock import get_clock
from .dispatcher import Dispatcher
from .listener import Listener
from .models import Run
from .report import DriveReport

__all__ = ["DUE_NOW_REST", "DUE_SLACK", "drive_for", "due_in"]

#: W1, W3: how long after a run's due time a rest ends, so that its drive finds it due.
DUE_SLACK = 0.002
#: The rest after a drive that did nothing while a run it may drive was due already (it
#: became due after the snapshot, or another worker had the stretch): short, never a spin.
DUE_NOW_REST = 0.05


def due_in(
    *, jobs: Iterable[str] | None = None, queues: Iterable[str] | None = None
) -> float | None:
    """Seconds until the earliest run this process may drive falls due; ``None`` if none waits.

    By the database's clock (L1), over running runs that no lease holds --
    a retry's back-off, a ``Defer``, a ``run_after``, a throttled run's
    release (C2, C3) -- of *jobs* (default: every registered one) and
    *queues* (default: every one). What a worker or a one-shot command rests
    on after a drive that found nothing due (W1, W3), so a rate-limited
    backlog drains at its rate, not at one begin per ``--interval``. One read
    of the live runs' range of the due index; never of finished runs.
    """
    names = tuple(spec.name for spec in driver.registered(jobs))
    if not names:
        return None
    waiting = Run.objects.using(router.db_for_read(Run)).waiting().unpaused()
    waiting = waiting.of_jobs(names, driver.queue_names(queues))
    found = waiting.aggregate(due=Min("next_attempt_at"), now=Max(get_clock().now_expr()))
    if found["due"] is None or found["now"] is None:
        return None
    seconds = (found["due"] - found["now"]).total_seconds()
    return DUE_NOW_REST if seconds <= 0 else seconds + DUE_SLACK


def drive_for(seconds: float, **options: Any) -> DriveReport:
    """Drive again while the last drive did work, for at most *seconds* (W3, ``--max-seconds``).

    Returns the drives' combined report. No pass begins once *seconds* have
    passed since the call; one already running then finishes. A drive that
    finds nothing due ends it -- unless a run falls due before the budget
    does (a retry's back-off, a ``Defer``, a ``run_after``, a throttled run's
    release): then it waits for that run (woken sooner by a notification on
    PostgreSQL, W2) and drives again. So a cron line ``rundueJobs
    --max-seconds 55`` empties a backlog in the minute it was started in, a
    rate-limited one at its rate, and exits as soon as nothing is left for
    it. A schedule's future due times never hold it: the next cron minute's
    command fires them. With ``concurrency`` above 1, one pool of threads
    serves every drive, and the last waits for every pass in flight (W5).
    """
    deadline = time.monotonic() + seconds
    combined = DriveReport()
    concurrency = driver.concurrency_of(options.pop("concurrency", None))
    dispatcher = Dispatcher(concurrency) if concurrency > 1 else None
    listener: Listener | None = None
    opened = False
    try:
        while True:
            report = driver.run_due_jobs(
                stop=lambda: time.monotonic() >= deadline,
                concurrency=concurrency,
                dispatcher=dispatcher,
                **options,
            )
            combined.merge(report)
            left = deadline - time.monotonic()
            if report.aborted or left <= 0:
                break
            if report.attempted or (dispatcher is not None and dispatcher.dispatched):
                continue
            if dispatcher is not None and dispatcher.pool.busy:
                # Passes still in flight: their outcomes may make runs due (a retry).
                combined.merge(driver.wait_for_passes(dispatcher))
                continue
            wait = due_in(jobs=options.get("jobs"), queues=options.get("queues"))
            if wait is None or wait >= left:
                break
            if not opened:
                listener, opened = Listener.open(), True
            _wait_for(listener, wait)
            if dispatcher is not None:
                dispatcher.rested()
        if dispatcher is not None:
            combined.merge(driver.wait_for_passes(dispatcher))
    finally:
        if dispatcher is not None:
            dispatcher.close()
        if listener is not None:
            listener.close()
    return combined


def _wait_for(listener: Listener | None, seconds: float) -> None:
    """Sleep *seconds*, or until a notification of new work arrives (W2)."""
    if listener is None:
        time.sleep(seconds)
        return
    try:
        listener.wait(seconds, lambda: False)
    except Exception:  # psycopg's own errors, from a dropped socket: sleep it out
        time.sleep(seconds)
