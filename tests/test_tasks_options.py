"""The backend's ``OPTIONS`` and a task's own, as each pass applies them (SPEC §9).

``tasks/options.py`` reads them; each pass runs under its backend's and its
task's (``tasks/calls.py``): retries with their back-off, a timeout, the
rule for a task whose worker died.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from django_leasejobs import Retry, RunStatus, compat
from django_leasejobs.models import Run, TaskAttempt
from django_leasejobs.tasks import LeaseJobsBackend
from tests import tasks
from tests.task_helpers import AT_ONCE, Status, drive, needs_task_options, ours, tasks_with

pytestmark = pytest.mark.django_db

#: A module of tasks imported before the app registry is ready -- as Django imports one
#: that an app's models or AppConfig import -- with every task it defines.
WHILE_APPS_LOAD = textwrap.dedent(
    """
    import json, sys

    from django.apps import apps

    import tests.scheduled_tasks  # and tests.tasks, which it imports
    from django_leasejobs.registry import registry

    json.dump(
        {
            "apps_ready": apps.apps_ready,
            "models": sorted(
                name
                for name in sys.modules
                if name.endswith(".models") and not name.startswith("django.")
            ),
            "scheduled": sorted(j.name for j in registry if j.name.startswith("tests.")),
        },
        sys.stdout,
    )
    """
)


# -- defining tasks -------------------------------------------------------------------------------


def test_tasks_a_module_of_tasks_imports_no_model_while_django_loads_apps():
    """SPEC §9: ``@task`` builds the backend and reads its options at import, before any model.

    Django may import a module of tasks while it is still loading apps, when
    importing a model fails. Defining a scheduled task registers its job then
    too. A process of its own, in which no app has been loaded.
    """
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": str(root)}
    child = subprocess.run(
        [sys.executable, "-c", WHILE_APPS_LOAD],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == 0, child.stderr
    seen = json.loads(child.stdout)
    assert seen["apps_ready"] is False
    assert seen["models"] == []  # neither the app's nor the test project's (Django's own: no model)
    hourly = ["hourly_fragile", "hourly_flaky", "hourly_report", "hourly_required", "hourly_skip"]
    defined = [f"tests.scheduled_tasks.{name}" for name in [*hourly, "every_two_seconds"]]
    assert seen["scheduled"] == (sorted(defined) if tasks.PER_TASK_OPTIONS else [])


# -- OPTIONS ---------------------------------------------------------------------------------------


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


# -- per-task options (Django 6.1 and the backport) ------------------------------------------------


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
