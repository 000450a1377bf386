"""``start()`` and ``start_many()``: the public way a run begins (SPEC §3, R1, R2).

Each finds the job in the registry, then hands it to the store
(:func:`~django_leasejobs.store.start_as`, :func:`~django_leasejobs.store.start_many`),
which never looks a job up itself: the store stays below the registry, whose
``Job.start()`` calls it in turn.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from .registry import Job, get_job
from .states import RunOrigin
from .store import StartResult, start_as
from .store import start_many as start_spec_many

__all__ = ["start", "start_many"]


def start(
    job: str | Job,
    payload: Any = None,
    *,
    instance: str = "default",
    again: bool = False,
    run_after: datetime | None = None,
    queue: str | None = None,
    priority: int | None = None,
) -> StartResult:
    """Start a run of *job*, or join the live one (SPEC R1).

    ``start()`` writes on the caller's connection inside the caller's
    transaction: a rollback undoes it, and no worker sees the run before the
    caller commits.

    Parameters
    ----------
    job:
        A registered job, or its name.
    payload:
        The run's input: JSON values only (R2), checked before anything is
        written.
    instance:
        What is being worked on; at most one live run per (job, instance).
    again:
        When joining, ask for one more run after the live one completes, with
        this call's payload (the "kick"). Any number of such joins collapse
        into one follow-up.
    run_after:
        An aware datetime: a new run is first due then, never earlier. At
        most ten years ahead. A join ignores it.
    queue, priority:
        Override the job's own (``@job(queue=..., priority=...)``) for a new
        run: which workers take it (W4), and its turn among due runs (D7). A
        join ignores them: the live run keeps its own.

    Returns
    -------
    StartResult
        ``joined=False`` with the new run, or ``joined=True`` with the live run
        as it stands (its cursor, counters and start time unchanged). A run
        cancelled while its pass is still in flight keeps its key until that
        pass stops (SPEC §3 ``cancel``): a start meanwhile joins it as a kick,
        and its follow-up starts once the pass has stopped.

    Raises
    ------
    JobNotRegistered
        *job* is not registered in this process; nothing is written.
    NotQueueSafe
        The payload holds something JSON would not return unchanged; the
        error names its path and nothing is written.
    InvalidKey
        *instance* is not a non-empty str of at most 200 storable characters
        (a ``ValueError``); nothing is written.
    ValueError
        *run_after* is naive, not a datetime, or more than ten years ahead;
        *priority* is not an int from -100 to 100; *queue* is not a non-empty
        str of at most 100 characters. Nothing is written.

    """
    return start_as(
        RunOrigin.API,
        get_job(job),
        payload,
        instance=instance,
        again=again,
        run_after=run_after,
        queue=queue,
        priority=priority,
    )


def start_many(
    job: str | Job, items: Iterable[tuple[str, Any]], *, run_after: datetime | None = None
) -> list[StartResult]:
    """Start or join one run per ``(instance, payload)`` item, as :func:`start` would each.

    Every payload is checked before anything is written, and each chunk of
    the batch is a constant number of statements (on PostgreSQL one of them
    notifies idle workers, W2). Like :func:`start`, it writes inside the
    caller's transaction.

    Parameters
    ----------
    job:
        A registered job, or its name.
    items:
        ``(instance, payload)`` pairs. An instance repeated within the batch
        joins the run its first item started.
    run_after:
        As for :func:`start`: the new runs are first due then, never earlier.

    Returns
    -------
    list[StartResult]
        One per item, in the items' order.

    Raises
    ------
    JobNotRegistered, NotQueueSafe, InvalidKey, ValueError
        As :func:`start` would for one item, naming the item by its 0-based
        index (``items.3.payload.x``); nothing is written for any item.
    TypeError
        An item is not an ``(instance, payload)`` pair; nothing is written.
    """
    return start_spec_many(get_job(job), items, run_after=run_after)
