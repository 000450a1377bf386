"""The backend's own calls: enqueue, validate_task, get_result (SPEC §9; ``tasks/backend.py``).

Every task here is enqueued through the framework's own API (``@task`` /
``.enqueue()`` / ``.get_result()``): what one enqueue writes, what it
refuses before writing anything, how it rides the caller's transaction,
and which ids ``get_result()`` refuses.
"""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import transaction

from django_leasejobs import NotQueueSafe, RunOrigin, RunStatus, compat, run_due_jobs, start
from django_leasejobs.models import Run
from django_leasejobs.tasks import TASK_JOB, LeaseJobsBackend
from tests import tasks
from tests.task_helpers import Status, drive, tasks_with

pytestmark = pytest.mark.django_db


# -- enqueue ---------------------------------------------------------------------------------------


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


def test_tasks_backend_flags_are_true():
    """SPEC §9: the backend subclasses the framework's and sets the four ``supports_*`` flags."""
    backend = compat.task_backends["default"]
    assert isinstance(backend, LeaseJobsBackend)
    assert isinstance(backend, compat.BaseTaskBackend)
    assert backend.supports_defer is True
    assert backend.supports_async_task is True
    assert backend.supports_get_result is True
    assert backend.supports_priority is True


# -- R2 at enqueue ---------------------------------------------------------------------------------


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


# -- the caller's transaction ----------------------------------------------------------------------


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


# -- run_after, priority, queues (D7, W4) ----------------------------------------------------------


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


# -- get_result of what is not a task's result -----------------------------------------------------


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
