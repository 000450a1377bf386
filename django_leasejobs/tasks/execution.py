"""The built-in job ``django_leasejobs.task``: every Django task's run (SPEC §9, L10).

Each pass of a task run, in order: the worker's id is recorded as a new
attempt (:class:`~django_leasejobs.models.TaskAttempt`) right after BEGIN;
``task_started`` is sent; the task is called -- ``task.call``, so ``async
def`` tasks run too, with a ``TaskContext`` first when it ``takes_context``
-- under a heartbeat (L10), as the job's ``heartbeat=True`` says; its return
value, normalised to JSON and held to R2, is the run's ``result``. An
exception is recorded on the attempt and the pass fails under the task's
retry policy (R4).

``task_finished`` is sent once, at the final outcome: after the commit that
made the run ``done``, or after the settle that failed it for good -- and
then from inside an ``except`` block, so Django's own log receiver records
the exception with its traceback, as much of it as ``last_error`` shows
(:mod:`.failures`). A failure that will be retried sends nothing: the task
has not finished.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
from collections import OrderedDict
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils.module_loading import import_string

from django_leasejobs import compat, signals
from django_leasejobs.codec import encode
from django_leasejobs.exceptions import PassTimedOut
from django_leasejobs.holder import process_start
from django_leasejobs.models import WORKER_ID_LENGTH, Run, TaskAttempt
from django_leasejobs.passes import Pass, PassResult
from django_leasejobs.policy import Retry
from django_leasejobs.registry import Job, registry
from django_leasejobs.store.base import alias, now

from .backend import LeaseJobsBackend
from .envelope import Envelope
from .failures import class_path, for_the_log, stored_traceback
from .options import BACKEND_PATH, TASK_JOB, LeaseJobsTask, TaskOptions
from .results import read_result

__all__ = ["cancelled", "read_result", "register", "run_task", "worker_id"]

logger = logging.getLogger("django_leasejobs")


def worker_id() -> str:
    """This process as ``TaskResult.worker_ids`` shows it: ``host:pid:start``, ≤ 64 characters."""
    pid = os.getpid()
    tail = f":{pid}:{process_start(pid) or 0}"
    return socket.gethostname()[: WORKER_ID_LENGTH - len(tail)] + tail


# -- the pass --------------------------------------------------------------------------------

#: The exception each of this thread's latest failed task passes raised, by run id, for
#: its ``task_finished``: delivered at commit, which may come after a whole drive.
_failed = threading.local()
#: How many a thread keeps: a retried run's entry is replaced by its next attempt's.
FAILED_KEPT = 256


def _failures() -> OrderedDict[str, BaseException]:
    found: OrderedDict[str, BaseException] | None = getattr(_failed, "errors", None)
    if found is None:
        found = _failed.errors = OrderedDict()
    return found


def run_task(p: Pass) -> PassResult:
    """Call the task a run stands for, once, and hand back its return value."""
    _failures().pop(p.run.id, None)
    envelope = Envelope.read(p.payload)
    attempt = TaskAttempt.objects.using(alias()).create(
        run_id=p.run.id, owner=p.lease_owner, worker_id=worker_id(), began_at=now()
    )
    try:
        started = read_result(p.run.id, status=compat.TaskResultStatus.RUNNING)
        task = started.task
        _send(compat.task_started, task, task_result=started)
        arguments = [compat.TaskContext(task_result=started)] if task.takes_context else []
        returned = compat.normalize_json(task.call(*arguments, *envelope.args, **envelope.kwargs))
        # R2 and VALUE_MAX_BYTES here, not only at commit: a refused return value is
        # then this attempt's NotQueueSafe, whatever the reason (SPEC §9).
        encode(returned, "return_value")
        if p.timed_out():
            # R10: it returned too late to count; the attempt says so.
            raise PassTimedOut("the task returned after its timeout")
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        failures = _failures()
        failures[p.run.id] = exc
        while len(failures) > FAILED_KEPT:
            failures.popitem(last=False)
        TaskAttempt.objects.using(alias()).filter(pk=attempt.pk).update(
            error_class=class_path(type(exc)), traceback=stored_traceback(exc)
        )
        raise
    return p.done(result=returned)


# -- the job's options: the backend's, then the task's own -----------------------------------


def options_for(task: Any, envelope: Envelope) -> Job:
    """The built-in job as *task* (enqueued on *envelope*'s backend) runs: its options applied."""
    base = registry.get(TASK_JOB)
    backend = _backend(envelope.backend)
    options = backend.task_options if backend is not None else TaskOptions()
    own = task if isinstance(task, LeaseJobsTask) else None
    return dataclasses.replace(
        base,
        retry=(own.retry if own and isinstance(own.retry, Retry) else options.retry),
        timeout=(own.timeout if own and isinstance(own.timeout, timedelta) else options.timeout),
        safe_to_repeat=(
            own.safe_to_repeat if own and own.safe_to_repeat is not None else options.safe_to_repeat
        ),
        per_run=None,
    )


def _per_run(run: Run) -> Job:
    """The job for *run*, once claimed; the plain job when its task cannot be found.

    The pass itself then fails with the reason (a payload that holds no task
    call, a task that no longer imports), on the backend's policy.
    """
    try:
        envelope = Envelope.read(run.decoded_payload().value)
    except ValueError:
        return dataclasses.replace(registry.get(TASK_JOB), per_run=None)
    try:
        task: Any = envelope.bound(run)
    except LookupError:
        task = None
    return options_for(task, envelope)


def _backend(name: str) -> Any:
    try:
        found = compat.task_backends[name]
    except Exception:  # an alias no longer configured: InvalidTaskBackend
        return None
    return found if isinstance(found, LeaseJobsBackend) else None


# -- registering the job, and the final outcome's signal --------------------------------------


def our_aliases() -> list[tuple[str, dict[str, Any]]]:
    """The ``TASKS`` aliases whose backend is this one (or a subclass), with their settings."""
    found = []
    for name, params in (getattr(settings, "TASKS", None) or {}).items():
        path = params.get("BACKEND") if isinstance(params, dict) else None
        if path == BACKEND_PATH:
            found.append((name, params))
            continue
        try:
            backend = import_string(path) if isinstance(path, str) else None
        except ImportError:
            continue
        if isinstance(backend, type) and issubclass(backend, LeaseJobsBackend):
            found.append((name, params))
    return found


def register() -> Job | None:
    """Register the built-in job when ``TASKS`` names this backend (at app ready).

    One job for every alias: its lease -- what claims take -- is the longest
    ``LEASE`` among them (default ``LEASEJOBS["LEASE"]``); the rest of the
    options are each task's (:func:`options_for`).
    """
    aliases = our_aliases()
    if not aliases:
        return None
    leases = [TaskOptions.read(params.get("OPTIONS", {})).lease for _name, params in aliases]
    lease = max((value for value in leases if value is not None), default=None)
    spec = Job(
        name=TASK_JOB,
        handler=run_task,
        lease=lease,
        retry=TaskOptions().retry,
        heartbeat=True,
        per_run=_per_run,
        coalesce=False,
    )
    registry.register(spec)
    signals.run_completed.connect(_finished, sender=Run, dispatch_uid="leasejobs-task-completed")
    signals.run_failed.connect(_finished, sender=Run, dispatch_uid="leasejobs-task-failed")
    return spec


def _finished(sender: type[Run], run: Run, **kwargs: Any) -> None:
    """``task_finished``, once the run's final outcome is stored."""
    if run.job != TASK_JOB:
        return
    error = _failures().pop(run.pk, None)
    try:
        result = read_result(run.pk)
    except (Run.DoesNotExist, ValueError, LookupError) as exc:
        logger.warning("task_finished not sent for run id=%s: %s", run.pk, type(exc).__name__)
        return
    if error is None:
        _send(compat.task_finished, result.task, task_result=result)
        return
    try:
        # So that receivers see it in sys.exc_info(), as Django's own do -- as much
        # of it as last_error shows (SPEC §10): the log receiver writes it all out.
        raise for_the_log(error)
    except BaseException:
        _send(compat.task_finished, result.task, task_result=result)


def cancelled(run_id: str) -> None:
    """``task_finished`` for a task run an operator cancelled: its final outcome too."""
    if TASK_JOB not in registry:
        return
    try:
        result = read_result(run_id)
    except (Run.DoesNotExist, ValueError, LookupError):
        return  # not a task's run, or one whose task cannot be read back
    transaction.on_commit(
        lambda: _send(compat.task_finished, result.task, task_result=result), using=alias()
    )


def _send(signal: Any, task: Any, **kwargs: Any) -> None:
    """Send a task signal as its backend's class; a receiver that raises is logged."""
    backend = _backend(task.backend)
    signals.send_now(signal, type(backend) if backend is not None else LeaseJobsBackend, **kwargs)
