"""The built-in job ``django_leasejobs.task``: every Django task's run (SPEC §9, L10).

:func:`register` defines the job at app ready, when ``TASKS`` names this
backend. Each pass of one of its runs, in order: once the run is claimed,
its call is resolved (:class:`~.calls.TaskCall`) and the job takes that
task's options; right after BEGIN the pass records its attempt
(:mod:`.attempts`) and sends ``task_started``; then it calls the task --
``task.call``, so ``async def`` tasks run too, with a ``TaskContext`` first
when it ``takes_context`` -- under a heartbeat (L10), as the job's
``heartbeat=True`` says. The return value, normalised to JSON and held to
R2, is the run's ``result``. An exception is recorded on the attempt and the
pass fails under the task's retry policy (R4) -- its ``backoff``'s delay, or
none, when it has one (:mod:`.backoff`); ``task_finished`` follows at the
final outcome (:mod:`.finished`).
"""

from __future__ import annotations

import dataclasses
import functools

from django_leasejobs import compat, signals
from django_leasejobs.codec import encode
from django_leasejobs.exceptions import BackoffFailed, PassTimedOut
from django_leasejobs.models import Run
from django_leasejobs.passes import Pass, PassResult
from django_leasejobs.registry import Job, registry

from . import attempts, finished, scheduled
from .aliases import our_aliases
from .backoff import BackedOff
from .calls import TaskCall
from .envelope import Envelope
from .options import TASK_JOB, TaskOptions
from .results import task_result

__all__ = ["calling", "no_task_call", "per_run", "register", "run_task"]


def run_task(call: TaskCall, p: Pass) -> PassResult:
    """Call the task *call* names, once, and hand back its return value."""
    finished.forget(p.run.id)
    attempt = attempts.begin(p.run.id, p.lease_owner)
    try:
        task = call.bound()
        # The result as a reader would see it now: the claimed row, and the attempts
        # so far, this one last -- no read of the run, no second import (SPEC §13).
        started = task_result(
            call.run,
            attempts.of_run(p.run.id),
            envelope=call.envelope,
            task=task,
            in_flight=True,
            status=compat.TaskResultStatus.RUNNING,
        )
        signals.send_now(compat.task_started, call.sender, task_result=started)
        arguments = [compat.TaskContext(task_result=started)] if task.takes_context else []
        envelope = call.envelope
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
        attempts.failed(attempt, exc)
        failure = _backed_off(call, p, exc)
        finished.remember(p.run.id, failure)
        if failure is not exc:
            attempts.failed(attempt, failure)  # its traceback shows the task's as its cause
            raise failure from exc
        raise
    return p.done(result=returned)


def _backed_off(call: TaskCall, p: Pass, exc: BaseException) -> BaseException:
    """Ask the task's ``backoff``, if it has one, about *exc*: what the attempt failed with.

    *exc* itself, or the :class:`~django_leasejobs.exceptions.BackoffFailed` its ``backoff``
    raised in answer -- the run's error then, as it fails at once.
    """
    policy = call.options.retry
    if not isinstance(policy, BackedOff) or call.task is None:
        return exc
    # The result as the proposal hands it over: this attempt counted, its error recorded.
    result = task_result(
        call.run,
        attempts.of_run(p.run.id),
        envelope=call.envelope,
        task=call.task,
        in_flight=True,
        status=compat.TaskResultStatus.FAILED,
    )
    try:
        policy.judge(call.task.module_path, exc, result, call.run.attempts + 1)
    except BackoffFailed as failure:
        return failure
    return exc


def no_task_call(p: Pass) -> PassResult:
    """The job's own handler, run only by a pass whose payload holds no task call.

    Every other pass runs :func:`run_task` on the call :func:`per_run`
    resolved. This one fails with the reason -- the one ``per_run`` met -- on
    the job's default policy, before any attempt is recorded.
    """
    finished.forget(p.run.id)
    Envelope.read(p.payload)  # raises ValueError, saying what the payload lacks
    raise ValueError("the run's payload is not a task call")


def per_run(run: Run) -> Job:
    """The job as claimed *run*'s pass runs it: its call and its task's options.

    For a run of the built-in job -- the call its payload holds -- and for a
    scheduled task's, whose job hands its runs here (:func:`.scheduled.per_run`):
    the task, called with no arguments.
    """
    spec = registry.get(run.job)
    try:
        call = TaskCall.of(run, scheduled.envelope_of(run))
    except ValueError:
        return dataclasses.replace(spec, per_run=None)  # the pass fails in no_task_call()
    return calling(spec, call)


def calling(spec: Job, call: TaskCall) -> Job:
    """*spec* as one pass runs it: the task *call* as its handler, under the call's options."""
    return dataclasses.replace(
        spec,
        handler=functools.partial(run_task, call),
        retry=call.options.retry,
        timeout=call.options.timeout,
        safe_to_repeat=call.options.safe_to_repeat,
        per_run=None,
    )


def register() -> Job | None:
    """Register the built-in job when ``TASKS`` names this backend (at app ready),
    then import the modules each alias's ``OPTIONS["SCHEDULED_TASKS"]`` lists.

    One job for every alias: its lease -- what claims take -- is the longest
    ``LEASE`` among them (default ``LEASEJOBS["LEASE"]``); the rest of the
    options are each task's, applied to each pass (:func:`per_run`).
    """
    aliases = our_aliases()
    if not aliases:
        return None
    leases = [TaskOptions.read(params.get("OPTIONS", {})).lease for _name, params in aliases]
    lease = max((value for value in leases if value is not None), default=None)
    spec = Job(
        name=TASK_JOB,
        handler=no_task_call,
        lease=lease,
        retry=TaskOptions().retry,
        heartbeat=True,
        per_run=per_run,
        coalesce=False,
    )
    registry.register(spec)
    finished.connect()
    # Scheduled tasks (revision 4): every process defines the schedules its backend lists.
    for _name, params in aliases:
        scheduled.import_listed(TaskOptions.read(params.get("OPTIONS", {})).scheduled_tasks)
    return spec
