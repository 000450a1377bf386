"""``task_finished``: sent once, at a task run's final outcome (SPEC §9).

After the commit that made the run ``done``, after the settle that failed
it for good, or after an operator's cancel. A failure is sent from inside an
``except`` block, so that Django's own log receiver records the exception
with its traceback -- as much of it as ``last_error`` shows
(:mod:`.failures`). A failure that will be retried sends nothing: the task
has not finished.

The exception comes from the pass, which notes it here (:func:`remember`):
the outcome is delivered at commit, which may come after a whole drive, on
the thread that ran the pass.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any

from django.db import transaction

from django_leasejobs import compat, signals
from django_leasejobs.models import Run
from django_leasejobs.registry import registry
from django_leasejobs.store.base import alias

from . import scheduled
from .aliases import backend_named, sender_of
from .failures import for_the_log
from .options import TASK_JOB
from .results import read_result

__all__ = ["cancelled", "connect", "forget", "remember"]

logger = logging.getLogger("django_leasejobs")

#: The exception each of this thread's latest failed task passes raised, by run id.
_failed = threading.local()
#: How many a thread keeps: a retried run's entry is replaced by its next attempt's.
FAILED_KEPT = 256


def _failures() -> OrderedDict[str, BaseException]:
    found: OrderedDict[str, BaseException] | None = getattr(_failed, "errors", None)
    if found is None:
        found = _failed.errors = OrderedDict()
    return found


def remember(run_id: str, exc: BaseException) -> None:
    """Note *exc* as what run *run_id*'s pass on this thread raised, for its ``task_finished``."""
    failures = _failures()
    failures[run_id] = exc
    while len(failures) > FAILED_KEPT:
        failures.popitem(last=False)


def forget(run_id: str) -> None:
    """Drop what an earlier pass of run *run_id* on this thread noted: a new pass begins."""
    _failures().pop(run_id, None)


def connect() -> None:
    """Send ``task_finished`` for every task run's final outcome, from now on."""
    signals.run_completed.connect(_finished, sender=Run, dispatch_uid="leasejobs-task-completed")
    signals.run_failed.connect(_finished, sender=Run, dispatch_uid="leasejobs-task-failed")


def _finished(sender: type[Run], run: Run, **kwargs: Any) -> None:
    """``task_finished``, once the run's final outcome is stored."""
    if run.job != TASK_JOB and not scheduled.is_scheduled(run.job):
        return
    error = _failures().pop(run.pk, None)
    try:
        result = read_result(run.pk)
    except (Run.DoesNotExist, ValueError, LookupError) as exc:
        logger.warning("task_finished not sent for run id=%s: %s", run.pk, type(exc).__name__)
        return
    if error is None:
        _send(result)
        return
    try:
        # So that receivers see it in sys.exc_info(), as Django's own do -- as much
        # of it as last_error shows (SPEC §10): the log receiver writes it all out.
        raise for_the_log(error)
    except BaseException:
        _send(result)


def cancelled(run_id: str) -> None:
    """``task_finished`` for a task run an operator cancelled: its final outcome too."""
    if TASK_JOB not in registry:
        return
    try:
        result = read_result(run_id)
    except (Run.DoesNotExist, ValueError, LookupError):
        return  # not a task's run, or one whose task cannot be read back
    transaction.on_commit(lambda: _send(result), using=alias())


def _send(result: compat.AnyTaskResult) -> None:
    """Send ``task_finished`` for *result*, as its backend's class."""
    sender = sender_of(backend_named(result.task.backend))
    signals.send_now(compat.task_finished, sender, task_result=result)
