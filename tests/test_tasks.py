"""The Django Tasks backend in one process: enqueue, drive, read back (SPEC §9).

Every task here is enqueued through the framework's own API (``@task`` /
``.enqueue()`` / ``.get_result()``), driven by ``rundueJobs`` or
``run_due_jobs()`` and read back as the framework's ``TaskResult``. Worker
processes, kills and heartbeats are in ``test_tasks_processes.py``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import timedelta
from io import StringIO

import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import transaction
from django.test import TestCase, override_settings

from django_leasejobs import (
    NotQueueSafe,
    Retry,
    RunOrigin,
    RunStatus,
    cancel,
    compat,
    run_due_jobs,
    start,
)
from django_leasejobs.models import Run, TaskAttempt
from django_leasejobs.models.attempts import WORKER_ID_LENGTH
from django_leasejobs.tasks import TASK_JOB, LeaseJobsBackend
from django_leasejobs.tasks.options import BACKEND_PATH
from tests import tasks
from tests.utils import fresh

pytestmark = pytest.mark.django_db

Status = compat.TaskResultStatus

#: Django's own reference backend: it runs a task inside ``enqueue()``.
IMMEDIATE_PATH = f"{compat.FRAMEWORK}.backends.immediate.ImmediateBackend"

#: Per-task ``@task(...)`` options need a framework that passes extra keywords to
#: ``task_class``: Django 6.1 and the backport do, Django 6.0 does not.
needs_task_options = pytest.mark.skipif(
    not tasks.PER_TASK_OPTIONS,  # Django 6.0
    reason="Django 6.0's @task passes no extra keywords to task_class, so per-task "
    "options do not exist there (SPEC §9: Django 6.1 and the backport)",
)


def ours(options=None):
    """One ``TASKS`` alias on this backend, with the test project's queues."""
    return {"BACKEND": BACKEND_PATH, "QUEUES": ["default", "emails"], "OPTIONS": options or {}}


def tasks_with(options=None):
    """``override_settings`` for the default alias on this backend with *options*."""
    return override_settings(TASKS={"default": ours(options)})


#: Retried at once (no back-off), so each drive is one attempt.
AT_ONCE = {"base": timedelta(0), "cap": timedelta(0)}


def drive(**options):
    """One drive of the task runs only (module-level test jobs stay out of it).

    The run signals ``task_finished`` rides on are sent on commit, which the
    test's own transaction never reaches: they are delivered as the drive ends,
    as a drive in autocommit delivers each at its outcome.
    """
    with TestCase.captureOnCommitCallbacks(execute=True):
        return run_due_jobs(jobs=[TASK_JOB], **options)


# -- enqueue, drive, read back -------------------------------------------------------------------


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


def test_tasks_enqueue_is_one_ready_run_of_the_builtin_job_with_the_tasks_queue_and_priority():
    """SPEC §9: the enqueue result is READY, its id the run's; the run is origin ``task``."""
    result = tasks.send_email.enqueue("ann@example.com")
    assert result.status == Status.READY
    assert not result.is_finished
    assert (result.started_at, result.last_attempted_at, result.finished_at) == (None, None, None)
    assert result.enqueued_at is not None
    assert result.errors == result.worker_ids == []
    assert result.attempts == 0
    assert result.task == tasks.send_email
    assert result.args == ["ann@example.com"]
    assert result.kwargs == {}
    with pytest.raises(ValueError, match="not finished"):
        result.return_value  # noqa: B018
    run = Run.objects.get(pk=result.id)
    assert run.job == TASK_JOB == "django_leasejobs.task"
    assert run.origin == RunOrigin.TASK == "task"
    assert run.instance == tasks.send_email.module_path == "tests.tasks.send_email"
    assert (run.queue, run.priority) == ("emails", 10)
    assert run.status == RunStatus.RUNNING
    assert run.started_at == result.enqueued_at
    assert tasks.send_email.get_result(result.id).status == Status.READY


def test_tasks_every_enqueue_is_its_own_run_never_coalesced():
    """SPEC §9: "never coalesced: every enqueue is its own run" (R1 does not apply)."""
    first, second = tasks.add.enqueue(1, 2), tasks.add.enqueue(1, 2)
    assert first.id != second.id
    assert Run.objects.filter(pk__in=[first.id, second.id], job=TASK_JOB).count() == 2
    assert drive().completed == 2
    assert [tasks.add.get_result(r.id).return_value for r in (first, second)] == [3, 3]


def test_tasks_a_tuple_of_args_is_stored_and_returned_as_a_list():
    """SPEC §9: "a tuple of args is a list" (R2 holds the values inside it)."""
    result = compat.task_backends["default"].enqueue(tasks.add, args=(2, 3), kwargs={})
    assert result.args == [2, 3]
    drive()
    assert tasks.add.get_result(result.id).args == [2, 3]
    assert tasks.add.get_result(result.id).return_value == 5


def test_tasks_aenqueue_and_aget_result_reach_the_backend_by_keyword():
    """SPEC §9: the framework's ``aenqueue`` passes ``task``, ``args``, ``kwargs`` by keyword."""
    enqueued = async_to_sync(tasks.add.aenqueue)(4, b=5)
    assert enqueued.status == Status.READY
    drive()
    result = async_to_sync(tasks.add.aget_result)(enqueued.id)
    assert (result.status, result.return_value) == (Status.SUCCESSFUL, 9)


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


def test_tasks_a_task_reading_its_own_result_mid_pass_sees_running():
    """SPEC §9: a live run whose pass has begun and holds its lease reads as RUNNING."""
    enqueued = tasks.own_status.enqueue()
    drive()
    result = tasks.own_status.get_result(enqueued.id)
    assert result.status == Status.SUCCESSFUL
    assert result.return_value == {"context": "RUNNING", "read": "RUNNING"}


def test_tasks_backend_flags_are_true():
    """SPEC §9: the backend subclasses the framework's and sets the four ``supports_*`` flags."""
    backend = compat.task_backends["default"]
    assert isinstance(backend, LeaseJobsBackend)
    assert isinstance(backend, compat.BaseTaskBackend)
    assert backend.supports_defer is True
    assert backend.supports_async_task is True
    assert backend.supports_get_result is True
    assert backend.supports_priority is True


# -- failure and retry (R4) ----------------------------------------------------------------------


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


def test_tasks_each_alias_on_this_backend_runs_its_tasks_on_its_own_options():
    """SPEC §9: ``OPTIONS`` are the alias's: a task enqueued on another alias retries by its own."""
    other = ours({"RETRY": {"max_attempts": 2, **AT_ONCE}})
    with override_settings(TASKS={"default": ours(), "other": other}):
        on_default = tasks.explode.enqueue()
        on_other = tasks.explode.using(backend="other").enqueue()
        report = drive()
        assert (report.failed, report.retrying) == (1, 1)
        retrying = tasks.explode.using(backend="other").get_result(on_other.id)
        assert retrying.status == Status.READY
        assert retrying.backend == retrying.task.backend == "other"
        assert drive().failed == 1
        failed = compat.task_backends["other"].get_result(on_other.id)
        assert len(failed.errors) == 2
        assert len(tasks.explode.get_result(on_default.id).errors) == 1


def test_tasks_retry_option_retries_after_its_back_off_then_fails_after_max_attempts(frozen_clock):
    """SPEC §9 ``RETRY``, R4: each failed attempt adds an error; not due before its back-off."""
    retry = {"max_attempts": 3, "base": timedelta(seconds=1), "cap": timedelta(seconds=1)}
    with tasks_with({"RETRY": {**retry, "jitter": 0}}):
        enqueued = tasks.explode.enqueue()
        for attempt in (1, 2):
            assert drive().retrying == 1
            result = tasks.explode.get_result(enqueued.id)
            assert result.status == Status.READY  # live, retrying
            assert result.finished_at is None
            assert result.attempts == len(result.errors) == attempt
            assert {e.exception_class_path for e in result.errors} == {"builtins.ValueError"}
            assert drive().attempted == 0  # not before its back-off
            frozen_clock.advance(timedelta(seconds=1))
        assert drive().failed == 1
        result = tasks.explode.get_result(enqueued.id)
        assert result.status == Status.FAILED
        assert result.attempts == len(result.errors) == 3
        assert result.started_at < result.last_attempted_at <= result.finished_at
        assert drive().attempted == 0  # and never again


def test_tasks_retry_option_as_a_retry_object_lets_a_flaky_task_succeed_on_its_second_attempt():
    """SPEC §9: ``RETRY`` may be a ``Retry``; ``errors`` holds the failed attempt only."""
    with tasks_with({"RETRY": Retry(max_attempts=2, **AT_ONCE)}):
        enqueued = tasks.flaky.enqueue()
        assert drive().retrying == 1
        assert drive().completed == 1
        result = tasks.flaky.get_result(enqueued.id)
    assert result.status == Status.SUCCESSFUL
    assert result.return_value == 2  # the TaskContext's attempt on the second BEGIN
    assert result.attempts == len(result.worker_ids) == 2
    (error,) = result.errors
    assert error.exception_class_path == "builtins.ValueError"
    assert "attempt 1 fails" in error.traceback


def test_tasks_cancelled_run_is_failed_with_a_run_cancelled_error():
    """SPEC §9: ``cancelled`` → FAILED, its error a ``django_leasejobs.exceptions`` class."""
    enqueued = tasks.add.enqueue(1, 1)
    assert cancel(enqueued.id, by="tester")
    result = tasks.add.get_result(enqueued.id)
    assert result.status == Status.FAILED
    assert result.finished_at is not None
    assert [e.exception_class_path for e in result.errors] == [
        "django_leasejobs.exceptions.RunCancelled"
    ]
    assert drive().attempted == 0


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


def test_tasks_retry_enqueues_the_call_again_as_a_new_run_and_the_old_result_stays_failed(
    admin_client,
):
    """SPEC §3 ``retry``, A3: the admin's retry of a failed task run is a NEW task run."""
    failed = tasks.explode.enqueue("once")
    drive()
    assert tasks.explode.get_result(failed.id).status == Status.FAILED
    response = admin_client.post(
        "/admin/leasejobs/run/",
        {"action": "retry_runs", "_selected_action": [failed.id]},
    )
    assert response.status_code == 302
    again = Run.objects.exclude(pk=failed.id).get(job=TASK_JOB)
    assert (again.origin, again.instance, again.live_key) == ("retry", "tests.tasks.explode", None)
    assert tasks.explode.get_result(again.pk).status == Status.READY
    drive()
    retried = tasks.explode.get_result(again.pk)
    assert retried.args == ["once"]  # the same call
    assert (retried.status, retried.attempts, len(retried.errors)) == (Status.FAILED, 1, 1)
    old = tasks.explode.get_result(failed.id)
    assert (old.status, old.attempts, len(old.errors)) == (Status.FAILED, 1, 1)


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


# -- R2 at enqueue -------------------------------------------------------------------------------


class Opaque:
    pass


@pytest.mark.parametrize(
    ("args", "kwargs", "path"),
    [
        ((b"bytes",), {}, "args.0"),
        ((1, (2, 3)), {}, "args.1"),
        ((float("nan"),), {}, "args.0"),
        ((Opaque(),), {}, "args.0"),
        ((), {"name": [0, 1, 2, {3}]}, "kwargs.name.3"),
        ((), {"name": {"when": timedelta(1)}}, "kwargs.name.when"),
        ((), {"name": {1: "int key"}}, "kwargs.name.1"),
    ],
)
def test_tasks_non_json_args_are_refused_at_enqueue_naming_the_path_with_nothing_written(
    args, kwargs, path
):
    """SPEC §9, R2, §11: ``NotQueueSafe`` names the path, is a ``TypeError``; nothing written."""
    heard = []
    compat.task_enqueued.connect(heard.append, weak=False, dispatch_uid="t-refused")
    before = Run.objects.count()
    try:
        with pytest.raises(NotQueueSafe) as refused:
            tasks.echo.enqueue(*args, **kwargs)
    finally:
        compat.task_enqueued.disconnect(dispatch_uid="t-refused")
    assert isinstance(refused.value, TypeError)
    assert str(refused.value).startswith(f"{path} is ")
    assert refused.value.path == path
    assert Run.objects.count() == before
    assert heard == []


# -- the caller's transaction --------------------------------------------------------------------


class Boom(Exception):
    pass


def test_tasks_enqueue_in_a_rolled_back_atomic_block_leaves_no_run():
    """SPEC §9: enqueue writes in the caller's transaction: rollback = no task."""
    before = Run.objects.count()
    enqueued = []

    def enqueue_then_fail():
        with transaction.atomic():
            enqueued.append(tasks.add.enqueue(1, 2))
            assert Run.objects.filter(pk=enqueued[0].id).exists()  # written, on this connection
            raise Boom

    with pytest.raises(Boom):
        enqueue_then_fail()
    (enqueued,) = enqueued
    assert Run.objects.count() == before
    with pytest.raises(compat.TaskResultDoesNotExist):
        tasks.add.get_result(enqueued.id)
    assert drive().attempted == 0


@pytest.mark.django_db(transaction=True)
def test_tasks_a_refused_enqueue_inside_atomic_leaves_the_transaction_usable():
    """SPEC §9: "an error cannot poison the caller's transaction" (PostgreSQL aborts on any)."""
    with transaction.atomic():
        before = Run.objects.count()
        with pytest.raises(NotQueueSafe):
            tasks.add.enqueue({"a", "set"}, 1)
        with pytest.raises(compat.InvalidTask):
            tasks.add.using(queue_name="nope").enqueue(1, 1)
        with tasks_with({"UNKNOWN": 1}), pytest.raises(ImproperlyConfigured):
            tasks.add.enqueue(1, 1)
        assert Run.objects.count() == before  # the same transaction still answers
        kept = tasks.add.enqueue(1, 2)
    assert Run.objects.filter(pk=kept.id).exists()  # and it committed
    assert drive().completed == 1
    assert tasks.add.get_result(kept.id).return_value == 3


# -- run_after, priority, queues (D7, W4) --------------------------------------------------------


def test_tasks_run_after_is_not_run_before_its_time_then_is(frozen_clock):
    """SPEC §9: ``next_attempt_at = task.run_after`` (``supports_defer``), on the DB clock."""
    later = frozen_clock.now() + timedelta(hours=1)
    enqueued = tasks.add.using(run_after=later).enqueue(1, 2)
    assert Run.objects.get(pk=enqueued.id).next_attempt_at == later
    assert drive().attempted == 0
    frozen_clock.advance(timedelta(minutes=59, seconds=59))
    assert drive().attempted == 0
    result = tasks.add.get_result(enqueued.id)
    assert (result.status, result.started_at) == (Status.READY, None)
    frozen_clock.advance(timedelta(seconds=1))
    assert drive().completed == 1
    result = tasks.add.get_result(enqueued.id)
    assert (result.status, result.return_value) == (Status.SUCCESSFUL, 3)
    assert result.started_at == later
    assert result.task.run_after == later
    assert result.task == tasks.add.using(run_after=later)


def test_tasks_d7_a_higher_priority_task_is_driven_first():
    """SPEC §9, D7: ``priority = task.priority``; among due runs the higher one goes first."""
    low = tasks.add.using(priority=-5).enqueue(1, 1)  # enqueued, so due, first
    high = tasks.add.using(priority=5).enqueue(2, 2)
    assert Run.objects.get(pk=high.id).priority == 5
    assert drive(limit=1).completed == 1
    assert tasks.add.get_result(high.id).status == Status.SUCCESSFUL
    assert tasks.add.get_result(low.id).status == Status.READY
    assert drive(limit=1).completed == 1
    assert tasks.add.get_result(low.id).status == Status.SUCCESSFUL
    assert tasks.add.get_result(low.id).task.priority == -5


def test_tasks_a_queue_outside_the_aliases_queues_is_refused():
    """SPEC §9: ``validate_task`` refuses a queue not in the alias's ``QUEUES`` (InvalidTask)."""
    before = Run.objects.count()
    with pytest.raises(compat.InvalidTask, match="nope"):
        tasks.add.using(queue_name="nope")
    assert Run.objects.count() == before


@pytest.mark.parametrize("priority", [True, 5.0])
def test_tasks_a_bool_or_float_priority_is_refused(priority):
    """SPEC §2: a priority is an int from -100 to 100, and a bool is not one (D7)."""
    with pytest.raises(compat.InvalidTask, match="priority must be an int"):
        tasks.add.using(priority=priority)


def test_tasks_w4_run_due_jobs_with_queues_runs_only_those_queues_tasks():
    """SPEC §9, W4: ``run_due_jobs(queues=["emails"])`` steps over the default queue's task."""
    email = tasks.send_email.enqueue("bob@example.com")
    other = tasks.add.enqueue(1, 2)
    assert run_due_jobs(queues=["emails"]).completed == 1
    assert tasks.send_email.get_result(email.id).status == Status.SUCCESSFUL
    assert tasks.add.get_result(other.id).status == Status.READY
    call_command("rundueJobs", "--queue", "default", stdout=StringIO())
    assert tasks.add.get_result(other.id).status == Status.SUCCESSFUL


# -- get_result of what is not a task's result ---------------------------------------------------


@pytest.mark.parametrize(
    "result_id",
    [
        "01ARZ3NDEKTSV4RRFFQ69G5FAV",  # well-formed, never enqueued
        "not-a-run-id",
        "",
        "01arz3ndektsv4rrffq69g5fav",  # a ULID is upper case
        "01ARZ3NDEKTSV4RRFFQ69G5FA",  # 25 characters
        "' OR '1'='1",
    ],
)
def test_tasks_unknown_or_malformed_id_is_task_result_does_not_exist(result_id):
    """SPEC §9: an unknown or malformed id raises ``TaskResultDoesNotExist``."""
    with pytest.raises(compat.TaskResultDoesNotExist):
        tasks.add.get_result(result_id)
    with pytest.raises(compat.TaskResultDoesNotExist):
        compat.task_backends["default"].get_result(result_id)


def test_tasks_id_of_a_run_that_is_not_a_tasks_is_task_result_does_not_exist():
    """SPEC §9: the id of a plain job's run (``start()``) is not a task result."""
    run = start("tests.noop").run
    with pytest.raises(compat.TaskResultDoesNotExist):
        compat.task_backends["default"].get_result(run.pk)
    with pytest.raises(compat.TaskResultDoesNotExist):
        tasks.add.get_result(run.pk)


# -- signals -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Heard:
    signal: str
    sender: type
    id: str
    status: str
    exception: BaseException | None


SIGNALS = {
    "enqueued": compat.task_enqueued,
    "started": compat.task_started,
    "finished": compat.task_finished,
}


@pytest.fixture
def heard():
    """Every task signal sent during the test, in order, with ``sys.exc_info()`` as received."""
    seen: list[Heard] = []

    def listener(name):
        def receive(sender, task_result, **kwargs):
            seen.append(Heard(name, sender, task_result.id, task_result.status, sys.exc_info()[1]))

        return receive

    for name, signal in SIGNALS.items():
        signal.connect(listener(name), weak=False, dispatch_uid=f"t-heard-{name}")
    yield seen
    for name, signal in SIGNALS.items():
        signal.disconnect(dispatch_uid=f"t-heard-{name}")


def _names(heard, result_id):
    return [h.signal for h in heard if h.id == result_id]


def test_tasks_signals_each_sent_once_for_a_successful_task(heard):
    """SPEC §9: ``task_enqueued`` at enqueue, ``task_started`` and ``task_finished`` once each."""
    enqueued = tasks.add.enqueue(1, 2)
    assert [(h.signal, h.status) for h in heard] == [("enqueued", Status.READY)]
    drive()
    assert [(h.signal, h.status) for h in heard] == [
        ("enqueued", Status.READY),
        ("started", Status.RUNNING),
        ("finished", Status.SUCCESSFUL),
    ]
    assert {h.id for h in heard} == {enqueued.id}
    assert {h.sender for h in heard} == {LeaseJobsBackend}  # the backend's class, as Django's


def test_tasks_task_enqueued_is_sent_at_once_with_the_run_written():
    """SPEC §9: ``task_enqueued`` at once, inside the caller's transaction, after the INSERT."""
    seen = []

    def receive(sender, task_result, **kwargs):
        seen.append((task_result.id, Run.objects.filter(pk=task_result.id).exists()))

    compat.task_enqueued.connect(receive, weak=False, dispatch_uid="t-enqueued-at-once")
    try:
        with transaction.atomic():
            enqueued = tasks.add.enqueue(1, 2)
            assert seen == [(enqueued.id, True)]  # before the block ends
    finally:
        compat.task_enqueued.disconnect(dispatch_uid="t-enqueued-at-once")
    assert seen == [(enqueued.id, True)]  # once


def test_tasks_signals_each_sent_once_for_a_failed_task_and_finished_sees_the_exception(heard):
    """SPEC §9: ``task_finished`` for a failure is sent inside the ``except`` block."""
    enqueued = tasks.explode.enqueue("seen by the receiver")
    drive()
    assert _names(heard, enqueued.id) == ["enqueued", "started", "finished"]
    finished = heard[-1]
    assert finished.status == Status.FAILED
    assert isinstance(finished.exception, ValueError)
    assert str(finished.exception) == "seen by the receiver"
    assert heard[0].exception is heard[1].exception is None


def test_tasks_a_retried_failure_sends_task_finished_once_after_its_last_attempt(heard):
    """SPEC §9: "``task_finished`` is sent once, at the final outcome", not per failed attempt."""
    with tasks_with({"RETRY": {"max_attempts": 2, **AT_ONCE}}):
        enqueued = tasks.explode.enqueue()
        assert drive().retrying == 1
        assert _names(heard, enqueued.id) == ["enqueued", "started"]
        assert drive().failed == 1
    assert _names(heard, enqueued.id) == ["enqueued", "started", "started", "finished"]
    finished = heard[-1]
    assert finished.status == Status.FAILED
    assert isinstance(finished.exception, ValueError)


def test_tasks_a_retried_success_sends_task_finished_once(heard):
    """SPEC §9: a failed attempt that will be retried sends no ``task_finished``."""
    with tasks_with({"RETRY": {"max_attempts": 2, **AT_ONCE}}):
        enqueued = tasks.flaky.enqueue()
        drive()
        drive()
    assert _names(heard, enqueued.id) == ["enqueued", "started", "started", "finished"]
    assert heard[-1].status == Status.SUCCESSFUL
    assert heard[-1].exception is None


def test_tasks_each_failure_in_one_drive_sends_task_finished_with_its_own_exception(heard):
    """SPEC §9: every failed task's ``task_finished`` receiver sees that task's exception."""
    first, second = tasks.explode.enqueue("first"), tasks.explode.enqueue("second")
    assert drive().failed == 2
    finished = {h.id: h for h in heard if h.signal == "finished"}
    assert set(finished) == {first.id, second.id}
    assert [str(finished[r.id].exception) for r in (first, second)] == ["first", "second"]


def test_tasks_a_signal_receiver_that_raises_breaks_neither_enqueue_nor_the_worker(caplog):
    """SPEC §9: receivers are the site's code; one that raises is logged, the task goes on."""

    def broken(sender, **kwargs):
        raise RuntimeError("receiver bug")

    for name, signal in SIGNALS.items():
        signal.connect(broken, weak=False, dispatch_uid=f"t-broken-{name}")
    try:
        enqueued = tasks.add.enqueue(2, 2)
        assert enqueued.status == Status.READY
        report = drive()
        failing = tasks.explode.enqueue()
        failed_report = drive()
    finally:
        for name, signal in SIGNALS.items():
            signal.disconnect(dispatch_uid=f"t-broken-{name}")
    assert report.completed == failed_report.failed == 1
    assert tasks.add.get_result(enqueued.id).return_value == 4
    assert tasks.explode.get_result(failing.id).errors[0].exception_class_path == (
        "builtins.ValueError"
    )
    logged = [r.getMessage() for r in caplog.records if r.name == "django_leasejobs"]
    assert any("RuntimeError" in message for message in logged)


# -- OPTIONS and backend.check() -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"UNKNOWN": 1}, "unknown option 'UNKNOWN'"),
        ({"RETRY": {"max_attempts": 0}}, "RETRY"),
        ({"RETRY": {"attempts": 3}}, "RETRY"),
        ({"RETRY": 3}, "RETRY"),
        ({"RETRY": {"base": timedelta(minutes=5), "cap": timedelta(seconds=1)}}, "RETRY"),
        ({"LEASE": timedelta(milliseconds=50)}, "LEASE"),
        ({"LEASE": 0.05}, "LEASE"),
        ({"LEASE": "5m"}, "LEASE"),
        ({"TIMEOUT": timedelta(0)}, "TIMEOUT"),
        ({"SAFE_TO_REPEAT": "no"}, "SAFE_TO_REPEAT"),
        ({"SAFE_TO_REPEAT": 0}, "SAFE_TO_REPEAT"),
        ("not a dict", "OPTIONS"),
    ],
)
def test_tasks_check_reports_bad_options_as_e102_and_enqueue_refuses_them(options, says):
    """SPEC §9: bad OPTIONS → ``leasejobs.E102``; enqueue: ImproperlyConfigured, nothing written."""
    direct = LeaseJobsBackend("default", ours(options))
    (message,) = direct.check()
    assert message.id == "leasejobs.E102"
    assert says in message.msg
    assert "TASKS['default']" in message.msg
    before = Run.objects.count()
    with override_settings(TASKS={"default": ours(options)}):
        configured = compat.task_backends["default"]
        assert [m.id for m in configured.check()] == ["leasejobs.E102"]
        with pytest.raises(ImproperlyConfigured, match="OPTIONS"):
            tasks.add.enqueue(1, 2)
    assert Run.objects.count() == before


def test_tasks_good_options_pass_the_check():
    """SPEC §9: each documented OPTION in its documented forms is accepted."""
    for options in (
        {},
        {"RETRY": Retry(max_attempts=3), "LEASE": timedelta(minutes=1)},
        {"RETRY": {"max_attempts": 2}, "LEASE": 30, "TIMEOUT": 10, "SAFE_TO_REPEAT": False},
        {"TIMEOUT": timedelta(minutes=5), "SAFE_TO_REPEAT": True, "LEASE": None},
    ):
        assert list(LeaseJobsBackend("default", ours(options)).check()) == [], options


def test_tasks_manage_py_check_surfaces_bad_options_once():
    """SPEC §9: ``manage.py check`` reports ``leasejobs.E102`` once, not once per framework."""
    with tasks_with({"RETRY": {"max_attempts": 0}}), pytest.raises(SystemCheckError) as failed:
        call_command("check")
    assert str(failed.value).count("(leasejobs.E102)") == 1
    call_command("check")  # and the test project's own settings are clean


# -- per-task options (Django 6.1 and the backport) ----------------------------------------------


def _plain(a: int = 0) -> int:
    """A module-level function for ``task(...)`` to wrap."""
    return a


@needs_task_options
def test_tasks_per_task_retry_overrides_the_backends_one_attempt():
    """SPEC §9: ``@task(retry=...)`` sets one task's policy over ``OPTIONS``' default."""
    enqueued = tasks.retried_by_its_own_policy.enqueue()
    assert drive().retrying == 1
    assert tasks.retried_by_its_own_policy.get_result(enqueued.id).status == Status.READY
    assert drive().failed == 1
    result = tasks.retried_by_its_own_policy.get_result(enqueued.id)
    assert result.status == Status.FAILED
    assert len(result.errors) == result.attempts == 2
    assert result.task == tasks.retried_by_its_own_policy


@needs_task_options
def test_tasks_per_task_timeout_fails_a_pass_that_returns_after_it():
    """SPEC §9, R10: ``@task(timeout=...)``: a task that returns too late has failed."""
    enqueued = tasks.hurried.enqueue(0.3)  # sleeps past its 100 ms timeout
    drive()
    result = tasks.hurried.get_result(enqueued.id)
    assert result.status == Status.FAILED
    assert [e.exception_class_path for e in result.errors] == [
        "django_leasejobs.exceptions.PassTimedOut"
    ]
    assert Run.objects.get(pk=enqueued.id).failure_code == "timeout"


def _crashed_mid_call(enqueued, now):
    """Make *enqueued*'s run look as a worker that died after BEGIN leaves it (L3)."""
    Run.objects.filter(pk=enqueued.id).update(
        lease_owner="01ARZ3NDEKTSV4RRFFQ69G5FAV", lease_began_at=now, next_attempt_at=now
    )
    TaskAttempt.objects.create(
        run_id=enqueued.id, owner="01ARZ3NDEKTSV4RRFFQ69G5FAV", worker_id="gone:1:1", began_at=now
    )


@needs_task_options
def test_tasks_per_task_safe_to_repeat_false_holds_a_task_whose_worker_died(frozen_clock):
    """SPEC §9, L3: ``@task(safe_to_repeat=False)`` holds the interrupted task; it reads READY."""
    with tasks_with({"RETRY": {"max_attempts": 3, **AT_ONCE}}):
        enqueued = tasks.not_safe_to_repeat.enqueue()
        _crashed_mid_call(enqueued, frozen_clock.now() - timedelta(seconds=1))
        assert drive().held == 1
        run = Run.objects.get(pk=enqueued.id)
        assert (run.status, run.failure_code) == (RunStatus.HELD, "interrupted")
        result = tasks.not_safe_to_repeat.get_result(enqueued.id)
    assert result.status == Status.READY  # live, waiting for an operator
    assert result.worker_ids == ["gone:1:1"]
    assert [e.exception_class_path for e in result.errors] == [
        "django_leasejobs.exceptions.PassAbandoned"
    ]


@needs_task_options
@pytest.mark.parametrize(
    "options",
    [
        {"retry": Retry(max_attempts=0)},
        {"retry": {"attempts": 2}},
        {"retry": "twice"},
        {"timeout": timedelta(0)},
        {"timeout": "5"},  # a number of seconds is a timeout (SPEC §9); a str is not
        {"safe_to_repeat": "no"},
        {"safe_to_repeat": 1},
    ],
)
def test_tasks_invalid_per_task_option_is_invalid_task_at_definition(options):
    """SPEC §9: a task's own options are checked when it is defined."""
    with pytest.raises(compat.InvalidTask, match=f"{__name__}._plain"):
        compat.task(**options)(_plain)


@needs_task_options
def test_tasks_per_task_options_accept_a_retry_dict():
    """SPEC §9: ``retry`` as a ``Retry`` or its keyword dict, as ``OPTIONS['RETRY']``."""
    defined = compat.task(retry={"max_attempts": 4}, timeout=timedelta(seconds=5))(_plain)
    assert defined.retry == Retry(max_attempts=4)
    assert defined.timeout == timedelta(seconds=5)
    assert defined.safe_to_repeat is None  # the backend's OPTIONS decide


# -- the same outcomes as Django's ImmediateBackend ----------------------------------------------

#: case -> (task, args, status, return value, the first error's exception class path)
CASES = {
    "returns_a_dict": ("send_email", ("ann@ex.com",), "SUCCESSFUL", {"sent": "ann@ex.com"}, None),
    "raises": ("explode", (), "FAILED", None, "builtins.ValueError"),
    "returns_a_set": ("returns_a_set", (), "FAILED", None, "builtins.TypeError"),
    "async": ("slow_add", (20, 22), "SUCCESSFUL", 42, None),
    "takes_context": ("attempt_number", (), "SUCCESSFUL", 1, None),
    "system_exit": ("exits", (), "FAILED", None, "builtins.SystemExit"),
    "returns_a_tuple": ("returns_a_tuple", (), "SUCCESSFUL", [1, [2, 3]], None),
    "returns_bytes": ("returns_bytes", (), "SUCCESSFUL", "café", None),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("backend", ["ours", "immediate"])
def test_tasks_outcome_is_what_djangos_immediate_backend_reports(backend, case):
    """SPEC §9: "code written against ``@task`` runs unchanged": status, value, error class.

    The expectations are written once; the ``immediate`` cases prove they are
    what Django's own backend reports, the ``ours`` cases that we report the same.
    """
    name, args, status, value, error_path = CASES[case]
    immediate = {"BACKEND": IMMEDIATE_PATH, "QUEUES": ["default", "emails"]}
    with override_settings(TASKS={"default": ours(), "immediate": immediate}):
        if backend == "immediate":
            bound = getattr(tasks, name).using(backend="immediate")
            result = bound.enqueue(*args)
            assert type(compat.task_backends["immediate"]).__name__ == "ImmediateBackend"
        else:
            bound = getattr(tasks, name)
            enqueued = bound.enqueue(*args)
            assert enqueued.status == Status.READY
            assert drive().attempted == 1
            result = bound.get_result(enqueued.id)
        assert result.task == bound
    assert result.status == status
    assert result.is_finished
    assert result.attempts == len(result.worker_ids) == 1
    assert result.args == list(args)
    assert result.kwargs == {}
    if status == "SUCCESSFUL":
        assert result.return_value == value
        assert result.errors == []
    else:
        with pytest.raises(ValueError, match="failed"):
            result.return_value  # noqa: B018
        assert [e.exception_class_path for e in result.errors] == [error_path]
        assert result.errors[0].traceback.startswith("Traceback (most recent call last)")


def test_tasks_check_reports_the_framework_missing_as_e101(monkeypatch):
    """SPEC §9: on Django 5.2 without the backport, ``check()`` says what to install."""
    monkeypatch.setattr(compat, "AVAILABLE", False)
    backend = LeaseJobsBackend("default", {"BACKEND": BACKEND_PATH})
    (error,) = backend.check()
    assert error.id == "leasejobs.E101"
    assert "django-leasejobs[tasks]" in error.msg


def test_tasks_check_reports_the_app_not_installed_as_e100(monkeypatch):
    """SPEC §9: the backend's runs need the app's tables."""
    from django.apps import apps

    installed = apps.is_installed
    monkeypatch.setattr(
        apps, "is_installed", lambda name: name != "django_leasejobs" and installed(name)
    )
    backend = LeaseJobsBackend("default", {"BACKEND": BACKEND_PATH})
    assert [error.id for error in backend.check()] == ["leasejobs.E100"]


def test_tasks_check_reports_a_bad_queue_name_as_e103():
    backend = LeaseJobsBackend("default", {"BACKEND": BACKEND_PATH, "QUEUES": ["ok", "x" * 101]})
    assert [error.id for error in backend.check()] == ["leasejobs.E103"]


def test_tasks_our_own_check_runs_the_backends_where_the_framework_would_not(monkeypatch):
    """Without the framework (or the backport's app), ``manage.py check`` still reports E1xx."""
    from django_leasejobs import checks

    monkeypatch.setattr(compat, "FRAMEWORK", "")
    monkeypatch.setattr(compat, "AVAILABLE", False)
    assert [message.id for message in checks.check_task_backends()] == ["leasejobs.E101"]
    monkeypatch.setattr(compat, "FRAMEWORK", "django.tasks")
    monkeypatch.setattr(compat, "AVAILABLE", True)
    assert checks.check_task_backends() == []  # Django's own check_tasks calls check()
