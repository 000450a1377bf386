"""The built-in job's pass: the call, what it returns, how it fails (SPEC §9, ``execution.py``).

Each task is enqueued, driven by ``rundueJobs`` or ``run_due_jobs()`` and
read back as the framework's ``TaskResult``. Worker processes, kills and
heartbeats are in ``test_tasks_processes.py``; the call resolved once per
pass in ``test_tasks_calls.py``.
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.test import override_settings

from django_leasejobs import RunStatus
from django_leasejobs.models import Run
from django_leasejobs.models.attempts import WORKER_ID_LENGTH
from tests import tasks
from tests.task_helpers import Status, drive
from tests.utils import fresh

pytestmark = pytest.mark.django_db


# -- a pass that returns ---------------------------------------------------------------------------


def test_tasks_enqueue_then_rundueJobs_is_successful_with_return_value():
    """SPEC §9: enqueue → ``rundueJobs`` → ``get_result``: SUCCESSFUL, timed, one attempt."""
    enqueued = tasks.echo.enqueue(1, [2, {"x": None}], name="n", flag=True)
    call_command("rundueJobs", stdout=StringIO())
    result = tasks.echo.get_result(enqueued.id)
    assert result.status == Status.SUCCESSFUL
    assert result.is_finished
    assert result.return_value == {
        "args": [1, [2, {"x": None}]],
        "kwargs": {"name": "n", "flag": True},
    }
    assert result.args == [1, [2, {"x": None}]]
    assert result.kwargs == {"name": "n", "flag": True}
    assert result.backend == "default"
    assert result.task == tasks.echo
    assert result.id == enqueued.id
    assert result.errors == []
    assert result.attempts == 1
    (worker,) = result.worker_ids
    assert 0 < len(worker) <= WORKER_ID_LENGTH
    assert None not in (
        result.enqueued_at,
        result.started_at,
        result.last_attempted_at,
        result.finished_at,
    )
    assert result.enqueued_at == enqueued.enqueued_at
    assert result.started_at == result.last_attempted_at  # one attempt: first BEGIN is latest
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert Run.objects.get(pk=enqueued.id).status == RunStatus.DONE


def test_tasks_takes_context_task_gets_its_first_attempt_number():
    """SPEC §9: a ``TaskContext`` comes first when ``takes_context``; ``attempt`` counts BEGINs."""
    enqueued = tasks.attempt_number.enqueue()
    drive()
    result = tasks.attempt_number.get_result(enqueued.id)
    assert (result.status, result.return_value) == (Status.SUCCESSFUL, 1)


def test_tasks_async_def_task_runs_to_successful_with_its_value():
    """SPEC §9: ``task.call`` runs an ``async def`` task (``supports_async_task``)."""
    enqueued = tasks.slow_add.enqueue(2, 40)
    assert drive().completed == 1
    result = tasks.slow_add.get_result(enqueued.id)
    assert (result.status, result.return_value) == (Status.SUCCESSFUL, 42)


# -- a pass that fails (R4) ------------------------------------------------------------------------


def test_tasks_raising_task_is_failed_with_its_exception_class_and_traceback():
    """SPEC §9, R4: one attempt by default, as Django's own backends; the error is kept."""
    enqueued = tasks.explode.enqueue("it broke")
    report = drive()
    assert report.failed == 1
    result = tasks.explode.get_result(enqueued.id)
    assert result.status == Status.FAILED
    assert result.is_finished
    assert result.finished_at is not None
    assert result.attempts == 1
    (error,) = result.errors
    assert error.exception_class_path == "builtins.ValueError"
    assert error.exception_class is ValueError
    assert "Traceback (most recent call last)" in error.traceback
    assert "ValueError: it broke" in error.traceback
    with pytest.raises(ValueError, match="failed"):
        result.return_value  # noqa: B018
    run = Run.objects.get(pk=enqueued.id)
    assert run.status == RunStatus.FAILED
    assert "ValueError" in run.last_error


def test_tasks_returning_a_set_is_failed_with_type_error():
    """SPEC §9: the return value is normalised to JSON and held to R2; a set cannot be."""
    enqueued = tasks.returns_a_set.enqueue()
    drive()
    result = tasks.returns_a_set.get_result(enqueued.id)
    assert result.status == Status.FAILED
    (error,) = result.errors
    assert error.exception_class_path == "builtins.TypeError"
    assert Run.objects.get(pk=enqueued.id).result is None


def test_tasks_a_return_value_json_cannot_hold_fails_naming_its_path():
    """SPEC §9, R2: the normalised return value is held to R2 (a NaN is not JSON)."""
    enqueued = tasks.returns_nan.enqueue()
    drive()
    result = tasks.returns_nan.get_result(enqueued.id)
    assert result.status == Status.FAILED
    (error,) = result.errors
    assert error.exception_class_path == "django_leasejobs.exceptions.NotQueueSafe"
    assert "return_value.ratio" in error.traceback


def test_tasks_system_exit_is_a_failed_task_and_the_drive_goes_on():
    """SPEC §9: any ``BaseException`` but ``KeyboardInterrupt`` is a failed attempt."""
    exited, fine = tasks.exits.enqueue(), tasks.add.enqueue(1, 1)
    report = drive()
    assert (report.failed, report.completed) == (1, 1)
    result = tasks.exits.get_result(exited.id)
    assert result.status == Status.FAILED
    assert [e.exception_class_path for e in result.errors] == ["builtins.SystemExit"]
    assert tasks.add.get_result(fine.id).return_value == 2


def test_tasks_redact_errors_keeps_no_message_in_the_traceback():
    """SPEC §9, §10: with ``REDACT_ERRORS`` the traceback keeps no message (a secret, say)."""
    with override_settings(LEASEJOBS={"REDACT_ERRORS": True}):
        enqueued = tasks.explode.enqueue("password=hunter2")
        drive()
        result = tasks.explode.get_result(enqueued.id)
    (error,) = result.errors
    assert error.exception_class_path == "builtins.ValueError"
    assert "tests/tasks.py" in error.traceback  # the frames are kept
    assert "hunter2" not in error.traceback
    assert "hunter2" not in Run.objects.get(pk=enqueued.id).last_error


def test_tasks_nul_and_lone_surrogates_round_trip_and_store_in_errors():
    """SPEC §12: text no backend stores raw (NUL, a lone surrogate) never reaches the driver."""
    awkward = "nul \x00 lone \ud800 end"
    echoed, exploded = tasks.echo.enqueue(awkward, key=awkward), tasks.explode.enqueue(awkward)
    report = drive()
    assert (report.completed, report.failed) == (1, 1)
    result = tasks.echo.get_result(echoed.id)
    assert result.return_value == {"args": [awkward], "kwargs": {"key": awkward}}
    assert (result.args, result.kwargs) == ([awkward], {"key": awkward})
    failed = tasks.explode.get_result(exploded.id)
    assert failed.status == Status.FAILED
    assert failed.args == [awkward]
    (error,) = failed.errors
    assert error.exception_class_path == "builtins.ValueError"
    assert "ValueError: nul " in error.traceback


def test_tasks_a_task_cancelled_mid_call_has_its_outcome_refused():
    """SPEC §3 ``cancel``, L6: the call returns, but its commit is refused -- FAILED, cancelled."""
    enqueued = tasks.cancelled_mid_call.enqueue()
    report = drive()
    assert (report.superseded, report.completed) == (1, 0)
    result = tasks.cancelled_mid_call.get_result(enqueued.id)
    assert result.status == Status.FAILED
    assert [e.exception_class_path for e in result.errors] == [
        "django_leasejobs.exceptions.RunCancelled"
    ]
    run = Run.objects.get(pk=enqueued.id)
    assert (run.status, run.result, run.live_key) == (RunStatus.CANCELLED, None, None)
    assert run.lease_owner is None  # the pass stopped: its lease (and any slot) let go


def test_tasks_a_task_path_that_no_longer_imports_fails_its_run_and_the_drive_goes_on():
    """SPEC §9, §11: a path that no longer imports fails the run with a clear ``last_error``."""
    gone, fine = tasks.add.enqueue(1, 1), tasks.add.enqueue(2, 2)
    run = Run.objects.get(pk=gone.id)
    Run.objects.filter(pk=gone.id).update(
        payload=run.payload.replace("tests.tasks.add", "tests.tasks.removed_since")
    )
    report = drive()
    assert (report.failed, report.completed) == (1, 1)
    failed = fresh(run)
    assert failed.status == RunStatus.FAILED
    assert "tests.tasks.removed_since" in failed.last_error
    assert tasks.add.get_result(fine.id).return_value == 4
