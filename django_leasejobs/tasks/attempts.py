"""A task run's attempts: the row each begun pass adds, and what a failure fills in (SPEC §9).

Each pass of a task run records itself right after BEGIN, as one new
:class:`~django_leasejobs.models.TaskAttempt` under its lease token: this
worker's id and the database's time. ``TaskResult.worker_ids``, the attempt
count a ``TaskContext`` shows and the per-attempt errors are read from these
rows (:mod:`.results`).
"""

from __future__ import annotations

import os
import socket

from django_leasejobs.holder import process_start
from django_leasejobs.models import WORKER_ID_LENGTH, TaskAttempt
from django_leasejobs.store.base import alias, now

from .failures import class_path, stored_traceback

__all__ = ["begin", "failed", "of_run", "worker_id"]


def worker_id() -> str:
    """This process as ``TaskResult.worker_ids`` shows it: ``host:pid:start``, ≤ 64 characters."""
    pid = os.getpid()
    tail = f":{pid}:{process_start(pid) or 0}"
    return socket.gethostname()[: WORKER_ID_LENGTH - len(tail)] + tail


def begin(run_id: str, owner: str) -> TaskAttempt:
    """Record the attempt of the pass that holds run *run_id* under *owner* (one ``INSERT``)."""
    return TaskAttempt.objects.using(alias()).create(
        run_id=run_id, owner=owner, worker_id=worker_id(), began_at=now()
    )


def of_run(run_id: str) -> list[TaskAttempt]:
    """Run *run_id*'s attempts, first to latest (one read): the one just begun is the last."""
    return list(TaskAttempt.objects.using(alias()).filter(run_id=run_id).order_by("pk"))


def failed(attempt: TaskAttempt, exc: BaseException) -> None:
    """Record on *attempt* the exception it ended with: its class path and traceback."""
    TaskAttempt.objects.using(alias()).filter(pk=attempt.pk).update(
        error_class=class_path(type(exc)), traceback=stored_traceback(exc)
    )
