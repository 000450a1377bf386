"""SPEC §9 revision 4, §7: scheduled tasks, ``@task(schedule="<cron>", timezone=, missed=)``.

A scheduled task is the job named by its module path (tests/scheduled_tasks.py):
its ``Schedule`` row, missed ledger and runs carry that name, and every §7
rule holds as for a scheduled ``@job`` -- firing once per due time (S2, also
between two ``rundueJobs --loop`` processes), the missed-run rules after an
outage (S3), pause and resume from the admin with its audit (S4), run now
(S5), the states (S6). Each run is one call of the task, read back as its
``TaskResult``. A task that takes arguments cannot be scheduled; a
``SCHEDULED_TASKS`` module that does not import is a check error.
"""

from __future__ import annotations

import importlib
import json
from datetime import datetime, timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from django_leasejobs import RunNowRefused, RunStatus, compat, run_due_jobs, run_now
from django_leasejobs.models import Missed, Run, Schedule
from django_leasejobs.registry import registry
from django_leasejobs.schedules import live_runs, state
from django_leasejobs.states import RunOrigin
from django_leasejobs.tasks import LeaseJobsBackend
from django_leasejobs.tasks import scheduled as scheduled_module
from tests.processes import django_command, end
from tests.task_helpers import Status, needs_task_options, ours
from tests.utils import at, wait_for

pytestmark = [pytest.mark.django_db, needs_task_options]

SCHEDULES = "/admin/leasejobs/schedule/"
REPORT = "tests.scheduled_tasks.hourly_report"
SKIP = "tests.scheduled_tasks.hourly_skip"
REQUIRED = "tests.scheduled_tasks.hourly_required"
FRAGILE = "tests.scheduled_tasks.hourly_fragile"
FLAKY = "tests.scheduled_tasks.hourly_flaky"
TICKS = "tests.scheduled_tasks.every_two_seconds"
HOURLY = (REPORT, SKIP, REQUIRED, FRAGILE, FLAKY)


@pytest.fixture
def scheduled(frozen_clock):
    """tests/scheduled_tasks.py defined (its jobs registered), rows made by a drive at 12:00.

    Each test defines them afresh and they are unregistered after it, so no other
    test's drive meets these schedules.
    """
    module = importlib.reload(importlib.import_module("tests.scheduled_tasks"))
    module.CALLS.clear()
    frozen_clock.set(at(12))
    run_due_jobs(jobs=list(HOURLY))
    yield module
    for name in scheduled_module.names():
        registry.unregister(name)


def runs(name):
    return Run.objects.filter(job=name).order_by("id")


def payload(run):
    return json.loads(run.payload)


def missed_rows(name):
    return list(Missed.objects.filter(job=name).order_by("due_at").values_list("cause", "action"))


def needs_arguments(to: str, subject: str = "") -> None:
    """A module-level function with a parameter: no schedule can call it."""


def takes_only_its_context(context) -> None:
    """With ``takes_context``: the context is not an argument a schedule must give."""


# -- S1, S2 ----------------------------------------------------------------------------------


def test_s1_9r4_a_scheduled_task_gets_a_schedule_row_named_by_its_path(scheduled):
    row = Schedule.objects.get(job=REPORT)
    assert (row.expression, row.timezone, row.rule) == ("0 * * * *", "UTC", "catch_up_once")
    assert row.next_due_at == at(13)
    assert Schedule.objects.get(job=SKIP).rule == "skip"
    assert registry.get(REPORT).schedule == "0 * * * *"


def test_s2_9r4_each_due_time_enqueues_one_run_of_the_task_read_back_as_its_result(
    scheduled, frozen_clock
):
    frozen_clock.set(at(13, 1))
    run_due_jobs(jobs=[REPORT])  # fires 13:00, then runs it
    run_due_jobs(jobs=[REPORT])  # nothing more is due
    (run,) = runs(REPORT)
    assert (run.origin, run.status) == (RunOrigin.SCHEDULE, RunStatus.DONE)
    assert payload(run)["covers"] == ["2026-03-01T13:00:00Z"]
    assert scheduled.CALLS == [("hourly_report", run.pk, 1)]  # its TaskContext: its own run
    result = scheduled.hourly_report.get_result(run.pk)
    assert result.status == Status.SUCCESSFUL
    assert result.return_value == "reported"
    assert result.task == scheduled.hourly_report
    assert (result.args, result.kwargs, result.attempts) == ([], {}, 1)
    assert Schedule.objects.get(job=REPORT).next_due_at == at(14)
    frozen_clock.set(at(14, 1))
    run_due_jobs(jobs=[REPORT])
    assert runs(REPORT).count() == 2


def test_s2_9r4_a_scheduled_task_sends_task_started_and_task_finished(scheduled, frozen_clock):
    seen = []

    def note(sender, task_result, signal, **kwargs):
        seen.append((signal, task_result.task.module_path, str(task_result.status)))

    compat.task_started.connect(note)
    compat.task_finished.connect(note)
    try:
        frozen_clock.set(at(13, 1))
        from django.test import TestCase

        with TestCase.captureOnCommitCallbacks(execute=True):
            run_due_jobs(jobs=[REPORT])
    finally:
        compat.task_started.disconnect(note)
        compat.task_finished.disconnect(note)
    assert [(s is compat.task_started, path, status) for s, path, status in seen] == [
        (True, REPORT, "RUNNING"),
        (False, REPORT, "SUCCESSFUL"),
    ]


# -- S3 ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "actions", "covered"),
    [
        (SKIP, ["skipped"] * 5, None),
        (REPORT, ["skipped"] * 4 + ["caught_up"], [17]),
        (REQUIRED, ["caught_up"] * 5, [13, 14, 15, 16, 17]),
    ],
)
def test_s3_9r4_after_an_outage_a_scheduled_task_goes_through_its_rule(
    scheduled, frozen_clock, name, actions, covered
):
    frozen_clock.set(at(17, 30))  # the workers were down from 12:00: past MISSED_GRACE
    run_due_jobs(jobs=[name])
    assert missed_rows(name) == [("worker_down", action) for action in actions]
    if covered is None:
        assert not runs(name).exists()
        assert scheduled.CALLS == []
    else:
        (run,) = runs(name)
        assert payload(run)["covers"] == [f"2026-03-01T{hour}:00:00Z" for hour in covered]
        assert run.status == RunStatus.DONE  # the task ran, once
        assert len(scheduled.CALLS) == 1
        assert Missed.objects.get(job=name, action="caught_up", due_at=at(17)).run_id == run.pk
    assert Schedule.objects.get(job=name).next_due_at == at(18)
    run_due_jobs(jobs=[name])  # a second drive records nothing twice
    assert len(missed_rows(name)) == 5


# -- S4, S5, S6 and the admin -------------------------------------------------------------------


def act(client, action, row, **extra):
    data = {"action": action, "_selected_action": [row.pk], **extra}
    return client.post(SCHEDULES, data, follow=True)


def test_s4_9r4_pause_and_resume_from_the_admin_are_audited_and_resume_applies_the_rule(
    scheduled, frozen_clock, admin_client
):
    row = Schedule.objects.get(job=REPORT)
    done = act(admin_client, "pause_schedules", row, apply="1", note="vendor down")
    assert "1 schedule paused." in done.content.decode()
    paused = Schedule.objects.get(pk=row.pk)
    assert (paused.paused_by, paused.pause_note) == ("admin", "vendor down")
    frozen_clock.set(at(15, 30))
    run_due_jobs(jobs=[REPORT])  # paused: fires nothing, records nothing
    assert not runs(REPORT).exists()
    assert not Missed.objects.filter(job=REPORT).exists()
    resumed = act(admin_client, "resume_schedules", row)
    assert "1 schedule resumed." in resumed.content.decode()
    audit = LogEntry.objects.filter(object_id=str(row.pk)).order_by("pk")
    assert audit.count() == 2
    assert "vendor down" in audit.first().change_message
    assert missed_rows(REPORT) == [("paused", "skipped")] * 2 + [("paused", "caught_up")]
    (run,) = runs(REPORT)
    run_due_jobs(jobs=[REPORT])
    assert Run.objects.get(pk=run.pk).status == RunStatus.DONE
    assert scheduled.CALLS == [("hourly_report", run.pk, 1)]


def test_s5_9r4_run_now_runs_the_task_by_hand_and_refuses_one_not_safe_to_repeat(scheduled):
    started = run_now(REPORT, "alice")
    assert started.run.job == REPORT
    with pytest.raises(RunNowRefused) as live:
        run_now(REPORT, "alice")
    assert live.value.reason == "live"
    run_due_jobs(jobs=[REPORT])
    assert scheduled.CALLS == [("hourly_report", started.run.pk, 1)]
    with pytest.raises(RunNowRefused) as fragile:
        run_now(FRAGILE, "alice")
    assert fragile.value.reason == "not_safe"


def test_s6_9r4_a_scheduled_task_reads_as_never_run_then_ok(scheduled, frozen_clock):
    def current():
        row = Schedule.objects.get(job=REPORT)
        return state(row, live_runs([REPORT]).get(REPORT), frozen_clock.now())

    assert current() == "never_run"
    frozen_clock.set(at(13, 1))
    run_due_jobs(jobs=[REPORT])
    assert current() == "ok"


def test_s6_9r4_a_scheduled_task_retries_by_its_own_options_then_reads_as_failed(
    scheduled, frozen_clock
):
    """``max_attempts=2, backoff=lambda exc, r: 60`` hold for its runs: retrying, then failed."""
    frozen_clock.set(at(13, 1))
    run_due_jobs(jobs=[FLAKY])
    (run,) = runs(FLAKY)
    assert run.status == RunStatus.RUNNING
    assert run.next_attempt_at == at(13, 2)
    row = Schedule.objects.get(job=FLAKY)
    assert state(row, live_runs([FLAKY]).get(FLAKY), frozen_clock.now()) == "retrying"
    frozen_clock.set(at(13, 2))
    run_due_jobs(jobs=[FLAKY])
    failed = Run.objects.get(pk=run.pk)
    assert (failed.status, failed.attempts) == (RunStatus.FAILED, 2)
    assert failed.last_error == "ConnectionError: the vendor is down"
    row = Schedule.objects.get(job=FLAKY)
    assert state(row, None, frozen_clock.now()) == "failed"
    result = scheduled.hourly_flaky.get_result(run.pk)
    assert [e.exception_class_path for e in result.errors] == ["builtins.ConnectionError"] * 2


def test_s1_9r4_a_copy_from_using_leaves_the_schedule_as_the_code_defines_it(scheduled):
    copy = scheduled.hourly_report.using(priority=7, queue_name="emails")
    assert copy.module_path == REPORT
    spec = registry.get(REPORT)
    assert (spec.priority, spec.queue) == (0, "default")


def test_a5_9r4_the_admins_schedule_pages_show_a_scheduled_task_by_its_path(
    scheduled, admin_client
):
    row = Schedule.objects.get(job=REPORT)
    assert REPORT in admin_client.get(SCHEDULES).content.decode()
    assert REPORT in admin_client.get(f"{SCHEDULES}{row.pk}/change/").content.decode()


# -- refused ------------------------------------------------------------------------------------


def test_9r4_a_scheduled_task_that_takes_arguments_is_refused_at_decoration():
    with pytest.raises(compat.InvalidTask) as caught:
        compat.task(schedule="0 * * * *")(needs_arguments)
    assert str(caught.value) == (
        "task tests.test_tasks_schedules.needs_arguments: a scheduled task takes no "
        "arguments, but 'to' has no default (each due time calls it with none)"
    )
    assert "tests.test_tasks_schedules.needs_arguments" not in registry


def test_9r4_a_scheduled_task_may_take_only_its_context():
    try:
        compat.task(schedule="0 * * * *", takes_context=True)(takes_only_its_context)
        assert "tests.test_tasks_schedules.takes_only_its_context" in registry
    finally:
        registry.unregister("tests.test_tasks_schedules.takes_only_its_context")


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"timezone": "UTC"}, "timezone= and missed= need a schedule="),
        ({"missed": "skip"}, "timezone= and missed= need a schedule="),
        ({"schedule": "0 0 30 2 *"}, "0 0 30 2 *"),
        ({"schedule": "every hour"}, "every hour"),
        ({"schedule": "0 * * * *", "missed": "sometimes"}, "sometimes"),
        ({"schedule": "0 * * * *", "timezone": "Mars/Olympus"}, "Mars/Olympus"),
    ],
)
def test_9r4_a_bad_schedule_is_refused_at_decoration_naming_the_task(options, problem):
    with pytest.raises(compat.InvalidTask) as caught:
        compat.task(takes_context=True, **options)(takes_only_its_context)
    assert str(caught.value).startswith("task tests.test_tasks_schedules.takes_only_its_context: ")
    assert problem in str(caught.value)
    assert "tests.test_tasks_schedules.takes_only_its_context" not in registry


def test_9r4_a_scheduled_tasks_module_that_does_not_import_is_a_check_error():
    params = ours({"SCHEDULED_TASKS": ["tests.scheduled_tasks", "tests.no_such_module"]})
    (error,) = [m for m in LeaseJobsBackend("default", params).check() if m.id.startswith("lease")]
    assert error.id == "leasejobs.E104"
    assert "'tests.no_such_module' does not import" in error.msg
    with override_settings(TASKS={"default": params}), pytest.raises(SystemCheckError) as caught:
        call_command("check")
    assert "leasejobs.E104" in str(caught.value)
    assert "tests.no_such_module" in str(caught.value)


def test_9r4_scheduled_tasks_must_be_a_list_of_module_paths():
    backend = LeaseJobsBackend("default", ours({"SCHEDULED_TASKS": "tests.scheduled_tasks"}))
    (error,) = backend.check()
    assert error.id == "leasejobs.E102"
    assert "SCHEDULED_TASKS must be a list of dotted module paths" in error.msg


# -- S2 between real processes -----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.concurrency
def test_s2_9r4_two_loop_workers_fire_each_due_time_of_a_scheduled_task_exactly_once():
    """Two ``rundueJobs --loop`` processes, each knowing the schedule through
    ``SCHEDULED_TASKS``, drive an every-2-seconds task: every due time is covered
    by exactly one run, and each run called the task once."""
    from tests.models import Effect

    env = {
        "LEASEJOBS_TEST_TASK_OPTIONS": json.dumps({"SCHEDULED_TASKS": ["tests.scheduled_tasks"]})
    }
    command = ("rundueJobs", "--loop", "--interval", "0.1", "--job", TICKS)
    workers = [django_command(*command, env=env) for _ in range(2)]
    wait_for(lambda: Effect.objects.filter(name="tick").count() >= 5, "five ticks", seconds=120)
    for worker in workers:
        _out, err = end(worker)
        assert worker.returncode == 0, err
    fired = list(runs(TICKS))
    covered = [datetime.fromisoformat(due) for run in fired for due in payload(run)["covers"]]
    assert len(covered) == len(set(covered))  # no due time twice
    expected = [min(covered) + timedelta(seconds=2 * n) for n in range(len(covered))]
    assert sorted(covered) == expected  # and none skipped between the first and the last
    done = [run.pk for run in fired if run.status == RunStatus.DONE]
    ticks = list(Effect.objects.filter(name="tick").values_list("run_id", flat=True))
    assert sorted(ticks) == sorted(done)  # each run called the task once
