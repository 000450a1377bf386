"""A task run read back as a ``TaskResult`` (SPEC §9).

Status, times and errors are derived from the run and its attempts
(:class:`~django_leasejobs.models.TaskAttempt`), never stored twice:

* ``RUNNING`` -- the run's pass has begun and holds its lease; any other
  live run (due, retrying, held, crashed and not yet taken over) is
  ``READY``; ``done`` is ``SUCCESSFUL``; ``failed`` and ``cancelled`` are
  ``FAILED``.
* ``errors`` -- one per failed attempt: the exception it recorded, or, for
  an attempt that stopped without recording one (its worker died, its lease
  ran out), :class:`~django_leasejobs.exceptions.PassAbandoned`. A run that
  failed or was cancelled with no attempt to show for it gets one error
  naming the reason from ``failure_code``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django_leasejobs import compat, exceptions
from django_leasejobs.clock import now_column, read_now
from django_leasejobs.models import Run, TaskAttempt
from django_leasejobs.states import FINISHED_TASK_STATUSES, FailureCode, LeaseState, RunStatus
from django_leasejobs.store.base import alias, runs

from . import scheduled
from .envelope import Envelope
from .options import TASK_JOB

__all__ = ["attempt_errors", "read_result", "run_errors", "task_result"]

#: The exception class a task error names when the run's outcome, not the
#: task, decided it.
_BY_CODE: dict[str, type[BaseException]] = {
    FailureCode.CANCELLED: exceptions.RunCancelled,
    FailureCode.HANDLER_FAILED: exceptions.LeaseJobsError,
    FailureCode.STEP_EXHAUSTED: exceptions.LeaseJobsError,
    FailureCode.TIMEOUT: exceptions.PassTimedOut,
    FailureCode.LEASE_EXPIRED: exceptions.PassAbandoned,
    FailureCode.INTERRUPTED: exceptions.PassAbandoned,
    FailureCode.LEASE_TOO_SHORT: exceptions.PassAbandoned,
    FailureCode.DECODE_FAILED: exceptions.DecodeFailed,
}


#: The columns one read takes: the run's, the database's "now", then one
#: attempt's -- a row per attempt, or one row of NULLs for a run with none.
_RUN_FIELDS = tuple(field.attname for field in Run._meta.concrete_fields)
_ATTEMPT_FIELDS = tuple(field.attname for field in TaskAttempt._meta.concrete_fields)
_ATTEMPT_PK = _ATTEMPT_FIELDS.index(TaskAttempt._meta.pk.attname)


def read_result(run_id: str, *, status: Any = None) -> compat.AnyTaskResult:
    """Task run *run_id* as a ``TaskResult``, in one read: the run LEFT JOINed to its attempts.

    One statement, as django-tasks-db's ``get_result()`` costs, rather than
    the run and then its attempts. The run's columns repeat on each attempt's
    row: few, as a task run has the attempts its retry policy allows, and
    those an operator's release adds.

    A scheduled task's run reads back too: the call its schedule made (:mod:`.scheduled`).

    Raises ``Run.DoesNotExist`` for no such task run, ``ValueError`` for a
    payload that holds no task call, ``TaskGone`` for a task that no longer imports.
    """
    joined = [f"task_attempts__{name}" for name in _ATTEMPT_FIELDS]
    rows = list(
        runs()
        .filter(pk=run_id, job__in=[TASK_JOB, *scheduled.names()])
        # The database's "now" comes back with the row, so the lease is judged on
        # its clock (L1) by Run.lease_state(), at no statement of its own.
        .annotate(leasejobs_now=now_column())
        .order_by("task_attempts__pk")
        .values_list(*_RUN_FIELDS, "leasejobs_now", *joined)
    )
    if not rows:
        raise Run.DoesNotExist(f"No task run {run_id!r}.")
    using, width = alias(), len(_RUN_FIELDS)
    run = Run.from_db(using, list(_RUN_FIELDS), rows[0][:width])
    attempts = [
        TaskAttempt.from_db(using, list(_ATTEMPT_FIELDS), row[width + 1 :])
        for row in rows
        if row[width + 1 + _ATTEMPT_PK] is not None  # NULL: a run with no attempt
    ]
    envelope = scheduled.envelope_of(run) or _envelope(run)
    return task_result(
        run,
        attempts,
        envelope=envelope,
        task=envelope.bound(run),
        in_flight=run.lease_state(read_now(rows[0][width])) == LeaseState.LEASED,
        status=status,
    )


def _envelope(run: Run) -> Envelope:
    decoded = run.decoded_payload()
    if not decoded.ok:
        raise ValueError(f"the run's payload does not parse ({decoded.error})")
    return Envelope.read(decoded.value)


def _path(kind: type[BaseException]) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


def task_result(
    run: Run,
    attempts: Sequence[TaskAttempt],
    *,
    envelope: Envelope,
    task: compat.AnyTask,
    in_flight: bool,
    status: Any = None,
) -> compat.AnyTaskResult:
    """*run* as a ``TaskResult``; *in_flight*: its pass has begun and holds its lease.

    *status* overrides the derived one (the worker reports ``RUNNING`` as it
    calls the task, before any reader could see it so).
    """
    status = status or _status(run, in_flight)
    current = in_flight and status == compat.TaskResultStatus.RUNNING
    per_attempt = attempt_errors(run, attempts, current=current)
    errors = [error for error in per_attempt if error is not None] + run_errors(run, per_attempt)
    result: compat.AnyTaskResult = compat.TaskResult(
        task=task,
        id=run.pk,
        status=status,
        enqueued_at=run.started_at,
        started_at=attempts[0].began_at if attempts else None,
        last_attempted_at=attempts[-1].began_at if attempts else None,
        finished_at=run.ended_at if status in FINISHED_TASK_STATUSES else None,
        args=envelope.args,
        kwargs=envelope.kwargs,
        backend=envelope.backend,
        errors=errors,
        worker_ids=[attempt.worker_id for attempt in attempts],
    )
    if status == compat.TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", _returned(run))
    return result


def _status(run: Run, in_flight: bool) -> Any:
    statuses = compat.TaskResultStatus
    if run.status == RunStatus.DONE:
        return statuses.SUCCESSFUL
    if run.status in (RunStatus.FAILED, RunStatus.CANCELLED):
        return statuses.FAILED
    return statuses.RUNNING if in_flight else statuses.READY


def attempt_errors(run: Run, attempts: Sequence[TaskAttempt], *, current: bool) -> list[Any]:
    """For each of *attempts*, the error it ended with, or ``None`` (it succeeded, or runs).

    The error it recorded; else, for an attempt that stopped without
    recording one, :class:`~django_leasejobs.exceptions.PassAbandoned` -- or,
    for the last, what the run's outcome says (``failure_code``). *current*:
    the last attempt is the pass in flight.
    """
    errors: list[Any] = []
    for number, attempt in enumerate(attempts, 1):
        if attempt.error_class:
            errors.append(
                compat.TaskError(
                    exception_class_path=attempt.error_class, traceback=attempt.traceback
                )
            )
        elif number < len(attempts):
            errors.append(_made(exceptions.PassAbandoned, _abandoned(attempt)))
        elif current or run.status in (RunStatus.DONE, RunStatus.CANCELLED):
            errors.append(None)  # in flight, returned, or stopped by the cancel below
        else:
            kind = _BY_CODE.get(run.failure_code, exceptions.PassAbandoned)
            errors.append(_made(kind, run.last_error or _abandoned(attempt)))
    return errors


def run_errors(run: Run, per_attempt: Sequence[Any]) -> list[Any]:
    """The run's own error after its attempts': the cancel, or a failure no attempt shows."""
    if run.status == RunStatus.CANCELLED:
        return [_made(exceptions.RunCancelled, run.last_error)]
    if run.status == RunStatus.FAILED and not any(per_attempt):
        return [_made(_BY_CODE.get(run.failure_code, exceptions.LeaseJobsError), run.last_error)]
    return []


def _abandoned(attempt: TaskAttempt) -> str:
    return (
        f"the attempt by {attempt.worker_id} stopped without an outcome: its worker died "
        "or lost its lease, and the run was taken over"
    )


def _made(kind: type[BaseException], text: str) -> Any:
    return compat.TaskError(exception_class_path=_path(kind), traceback=text)


def _returned(run: Run) -> object:
    decoded = run.decoded_result()
    return decoded.value if decoded.ok else None
