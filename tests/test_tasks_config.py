"""The tasks backend's configuration: the app, ``QUEUES``, durations (SPEC §9 revision 3, §11).

Each misconfiguration is refused in the words of the check that reports it
(``leasejobs.E100``, ``E103``), and each duration takes the same forms in
``OPTIONS`` and in ``@task(...)``: a timedelta or a number of seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection
from django.test import override_settings

from django_leasejobs import RunStatus, compat
from django_leasejobs.models import Run
from django_leasejobs.policy import MAX_DELAY
from django_leasejobs.tasks import TASK_JOB, LeaseJobsBackend
from django_leasejobs.tasks.options import BACKEND_PATH, TaskOptions
from django_leasejobs.testing import drive_until_idle
from tests import tasks
from tests.processes import command_env
from tests.task_helpers import Status, needs_task_options

pytestmark = pytest.mark.django_db


def with_queues(queues):
    return {"BACKEND": BACKEND_PATH, "QUEUES": queues}


# -- E100: the app not installed -----------------------------------------------------------------

#: A site whose TASKS names this backend but whose INSTALLED_APPS lacks the app,
#: on the test database (which has the tables: a write would land and be seen).
WITHOUT_THE_APP = textwrap.dedent(
    """
    import json, os, sys

    import django
    from django.conf import settings

    installed = ["django.contrib.contenttypes"]
    if django.VERSION < (6, 0):
        installed.append("django_tasks")
    settings.configure(
        INSTALLED_APPS=installed,
        USE_TZ=True,
        DATABASES={"default": json.loads(os.environ["TEST_DATABASE"])},
        TASKS={"default": {"BACKEND": "django_leasejobs.tasks.LeaseJobsBackend"}},
    )
    django.setup()

    from django_leasejobs import compat


    @compat.task
    def add(a, b):
        return a + b


    def outcome(call):
        try:
            call()
        except Exception as exc:
            return f"{type(exc).__module__}.{type(exc).__qualname__}", str(exc)
        return None, None


    backend = compat.task_backends["default"]
    json.dump(
        {
            "enqueue": outcome(lambda: add.enqueue(1, 2)),
            "get_result": outcome(lambda: backend.get_result("01ARZ3NDEKTSV4RRFFQ69G5FAV")),
            "check": [[m.id, m.msg, m.hint] for m in backend.check()],
        },
        sys.stdout,
    )
    """
)


@pytest.mark.django_db(transaction=True)
def test_tasks_s9_enqueue_without_the_app_installed_is_improperly_configured_in_e100s_words():
    """SPEC §9 revision 3: not the model loader's ``RuntimeError``; nothing written.

    A process of its own: a site that never installed the app has never
    imported its models, which is when the loader's error comes.
    """
    keys = ("ENGINE", "NAME", "USER", "PASSWORD", "HOST", "PORT", "OPTIONS")
    database = {key: connection.settings_dict[key] for key in keys}
    before = Run.objects.count()
    child = subprocess.run(
        [sys.executable, "-c", WITHOUT_THE_APP],
        env={**command_env(TEST_DATABASE=json.dumps(database)), "DJANGO_SETTINGS_MODULE": ""},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == 0, child.stderr
    seen = json.loads(child.stdout)
    (check,) = seen["check"]
    assert check[0] == "leasejobs.E100"
    words = f"{check[1]} {check[2]}"  # the check's message, then its hint
    assert "'django_leasejobs' is not in INSTALLED_APPS" in words
    assert seen["enqueue"] == ["django.core.exceptions.ImproperlyConfigured", words]
    assert seen["get_result"] == ["django.core.exceptions.ImproperlyConfigured", words]
    assert Run.objects.count() == before


# -- E103: QUEUES as a whole ---------------------------------------------------------------------


#: What the framework takes as ``QUEUES`` -- and a str, which it would take as its letters.
GOOD_QUEUES = [["default"], ("default",), {"default"}, frozenset({"default"}), []]
BAD_QUEUES = ["default", None, 5, {"default": 1}, b"default"]


def test_tasks_s9_e103_queues_must_be_a_list_tuple_or_set_of_names():
    """SPEC §9 revision 3: ``QUEUES = "default"`` is not the queues d, e, f, a, u, l, t."""
    for queues in BAD_QUEUES:
        backend = LeaseJobsBackend("default", with_queues(queues))
        (error,) = backend.check()
        assert error.id == "leasejobs.E103"
        assert error.msg == (
            "TASKS['default']: QUEUES must be a list, tuple or set of queue names, "
            f"got {type(queues).__name__} {queues!r}."
        )
        assert backend.queues == set()  # not a str's letters
        if isinstance(queues, str):
            assert error.hint == "For one queue, write QUEUES = ['default']."
    for queues in GOOD_QUEUES:
        assert list(LeaseJobsBackend("default", with_queues(queues)).check()) == [], queues


def test_tasks_s9_manage_py_check_refuses_queues_given_as_a_str():
    """SPEC §9 revision 3: ``manage.py check`` fails on it (it passed, as the letters)."""
    with (
        override_settings(TASKS={"default": with_queues("default")}),
        pytest.raises(SystemCheckError) as failed,
    ):
        call_command("check")
    assert str(failed.value).count("(leasejobs.E103)") == 1
    assert "QUEUES must be a list, tuple or set of queue names, got str 'default'" in str(
        failed.value
    )


def test_tasks_s9_enqueue_under_queues_given_as_a_str_is_refused_naming_queues():
    """SPEC §9, §11: the task is refused with the reason, not "queue 'default' is not valid"."""
    before = Run.objects.count()
    with (
        override_settings(TASKS={"default": with_queues("default")}),
        pytest.raises(compat.InvalidTask, match="QUEUES must be a list, tuple or set"),
    ):
        tasks.add.enqueue(1, 2)
    assert Run.objects.count() == before


# -- the framework missing (E101), the app (E100), a queue name (E103), our own check --------------


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


# -- durations: a timedelta or seconds, in OPTIONS and per task ----------------------------------


@needs_task_options
@pytest.mark.parametrize("seconds", [5, 5.0])
def test_tasks_s9_timeout_takes_seconds_or_a_timedelta_per_task_as_in_options(seconds):
    """SPEC §9: the task class "takes the same options" as ``OPTIONS``, in the same forms."""
    for timeout in (seconds, timedelta(seconds=seconds)):
        defined = compat.task(timeout=timeout)(_plain)
        assert defined.timeout == timedelta(seconds=5)
        options = TaskOptions.read({"TIMEOUT": timeout, "LEASE": timeout})
        assert (options.timeout, options.lease, options.problems) == (
            timedelta(seconds=5),
            timedelta(seconds=5),
            (),
        )


@needs_task_options
@pytest.mark.parametrize("timeout", [0, -1, 0.0, True, "5", float("nan"), float("inf"), 10**20])
def test_tasks_s9_a_bad_timeout_is_refused_alike_per_task_and_in_options(timeout):
    """SPEC §9: one reading of a duration, so one refusal, naming what it got."""
    with pytest.raises(compat.InvalidTask) as refused:
        compat.task(timeout=timeout)(_plain)
    (problem,) = TaskOptions.read({"TIMEOUT": timeout}).problems
    assert str(refused.value) == f"task {__name__}._plain: {problem.replace('TIMEOUT', 'timeout')}"
    assert problem == (
        "TIMEOUT must be a timedelta or a number of seconds, more than zero and at most "
        f"{MAX_DELAY.days} days, got {timeout!r}"
    )


@needs_task_options
def test_tasks_s9_r10_a_per_task_timeout_in_seconds_fails_a_pass_that_returns_after_it():
    """SPEC §9, R10: ``@task(timeout=0.1)`` is 100 ms, as ``OPTIONS["TIMEOUT"] = 0.1`` is."""
    enqueued = tasks.hurried_in_seconds.enqueue(0.3)
    drive_until_idle(jobs=[TASK_JOB])
    result = tasks.hurried_in_seconds.get_result(enqueued.id)
    assert result.status == Status.FAILED
    assert [e.exception_class_path for e in result.errors] == [
        "django_leasejobs.exceptions.PassTimedOut"
    ]
    run = Run.objects.get(pk=enqueued.id)
    assert (run.status, run.failure_code) == (RunStatus.FAILED, "timeout")


def _plain(a: int = 0) -> int:
    """A module-level function for ``task(...)`` to wrap."""
    return a
