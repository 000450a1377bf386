"""Runs of Django tasks in the operators' admin (SPEC §8 A1-A2, §9).

The list names a task run by its path, filters and searches by it along an
index; the detail page decodes the call and the return value and lists each
attempt with its error, derived ones included; a task run that does not read
back as a task result still renders, saying why.
"""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django.utils.html import escape

from django_leasejobs import RunStatus, run_due_jobs
from django_leasejobs.models import Run, TaskAttempt
from django_leasejobs.tasks import TASK_JOB
from tests import tasks
from tests.factories import RunFactory

pytestmark = pytest.mark.django_db

RUNS = "/admin/leasejobs/run/"
SCRIPT = "<script>alert(1)</script>"
TASK_HEADING = 'class="fieldset-heading">Task</h2>'


def drive():
    return run_due_jobs(jobs=[TASK_JOB])


def detail(client, run_id):
    response = client.get(f"{RUNS}{run_id}/change/")
    assert response.status_code == 200
    return response.content.decode()


def listed(response):
    return [run.pk for run in response.context["cl"].result_list]


def pretty(value):
    """*value* as the detail page prints it: indented JSON, then HTML-escaped."""
    return escape(json.dumps(value, indent=2, sort_keys=True))


# -- A1: the list -----------------------------------------------------------------------------


def test_a1_the_list_names_a_task_run_by_its_task_path(admin_client):
    tasks.add.enqueue(1, 2)
    RunFactory(job="tests.walk", instance="tenant-1")
    content = admin_client.get(RUNS).content.decode().replace("<wbr>", "")  # A8: wraps at dots
    assert "task: tests.tasks.add" in content
    assert "task: tenant-1" not in content  # other runs keep their job's name


def test_a1_the_task_filter_lists_the_recent_task_paths_and_filters_by_one(admin_client):
    add = tasks.add.enqueue(1, 2)
    tasks.send_email.enqueue("ops@example.com")
    RunFactory(job="tests.walk", instance="tests.tasks.add")  # not a task run: same instance
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(RUNS)
    content = response.content.decode()
    assert "?task=tests.tasks.add" in content
    assert "?task=tests.tasks.send_email" in content
    assert not [q["sql"] for q in queries if "DISTINCT" in q["sql"].upper()]
    filtered = admin_client.get(RUNS, {"task": "tests.tasks.add"})
    assert listed(filtered) == [add.id]


def test_w4_the_queue_filter_lists_the_task_backends_queues(admin_client):
    # No registered job names "emails": it comes from TASKS["default"]["QUEUES"].
    sent = tasks.send_email.enqueue("ops@example.com")
    content = admin_client.get(RUNS).content.decode()
    assert "?queue=emails" in content
    assert listed(admin_client.get(RUNS, {"queue": "emails"})) == [sent.id]


def test_a1_the_task_filter_reads_a_bounded_number_of_the_latest_task_runs(admin_client):
    tasks.add.enqueue(1, 2)
    job = connection.ops.quote_name("job")
    with CaptureQueriesContext(connection) as queries:
        assert admin_client.get(RUNS).status_code == 200
    (read,) = [q["sql"] for q in queries if f"{job} = '{TASK_JOB}'" in q["sql"]]
    assert "LIMIT 1000" in read
    assert "ORDER BY" in read


def test_a1_a_task_not_run_lately_still_filters_and_is_listed(admin_client):
    tasks.add.enqueue(1, 2)
    response = admin_client.get(RUNS, {"task": "tests.tasks.retired"})
    assert response.status_code == 200
    assert listed(response) == []
    assert "?task=tests.tasks.retired" in response.content.decode()


def test_a1_search_finds_task_runs_by_path_as_stored_or_as_listed(admin_client):
    add = tasks.add.enqueue(1, 2)
    tasks.send_email.enqueue("ops@example.com")
    other = RunFactory(job="tests.walk", instance="tests.tasks.add")
    by_instance = admin_client.get(RUNS, {"q": "tests.tasks.add"})
    assert sorted(listed(by_instance)) == sorted([add.id, other.pk])
    as_listed = admin_client.get(RUNS, {"q": "task: tests.tasks.add"})
    assert listed(as_listed) == [add.id]


def test_a1_the_list_reads_no_more_statements_for_more_task_runs(admin_client):
    RunFactory(job="tests.walk")
    tasks.add.enqueue(1, 2)
    with CaptureQueriesContext(connection) as one:
        assert admin_client.get(RUNS).status_code == 200
    for n in range(10):
        tasks.add.enqueue(n, n)
        tasks.explode.enqueue(message=f"boom {n}")
    drive()
    tasks.send_email.enqueue("ops@example.com")
    with CaptureQueriesContext(connection) as many:
        response = admin_client.get(RUNS)
    shown = response.content.decode().replace("<wbr>", "")  # the job's wrap points (A8)
    assert shown.count("task: tests.tasks.explode") == 10
    assert len(many) == len(one)


# -- A2: the detail page --------------------------------------------------------------------


def test_a2_a_task_run_shows_its_call_return_value_and_attempt(admin_client):
    result = tasks.add.enqueue(1, 2)
    drive()
    content = detail(admin_client, result.id)
    assert TASK_HEADING in content
    assert "tests.tasks.add" in content
    assert "Successful" in content
    assert pretty([1, 2]) in content
    assert pretty({}) in content  # no kwargs
    assert '<pre style="white-space:pre-wrap;margin:0">3</pre>' in content
    (attempt,) = TaskAttempt.objects.filter(run_id=result.id)
    assert attempt.worker_id in content
    assert "<em>returned</em>" in content


def test_a2_a_failed_task_shows_its_error_and_traceback_escaped(admin_client):
    result = tasks.explode.enqueue(message=SCRIPT)
    drive()
    assert Run.objects.get(pk=result.id).status == RunStatus.FAILED
    content = detail(admin_client, result.id)
    assert SCRIPT not in content
    assert pretty({"message": SCRIPT}) in content
    assert "builtins.ValueError" in content
    assert "Traceback (most recent call last)" in content
    assert "ValueError: &lt;script&gt;alert(1)&lt;/script&gt;" in content
    assert "none: the task did not return" in content


def test_a2_an_attempt_whose_worker_died_shows_the_derived_error(admin_client):
    result = tasks.add.enqueue(1, 2)
    TaskAttempt.objects.create(
        run_id=result.id, owner="0" * 26, worker_id="lost-host:1:1", began_at=timezone.now()
    )
    drive()  # the second attempt returns
    content = detail(admin_client, result.id)
    assert "django_leasejobs.exceptions.PassAbandoned <em>(derived)</em>" in content
    assert "the attempt by lost-host:1:1 stopped without an outcome" in content
    assert "<em>returned</em>" in content


def test_a2_a_cancelled_task_shows_the_cancel_as_the_runs_own_error(admin_client):
    result = tasks.add.enqueue(1, 2)
    response = admin_client.post(
        RUNS, {"action": "cancel_runs", "_selected_action": [result.id]}, follow=True
    )
    assert response.status_code == 200
    content = detail(admin_client, result.id)
    assert "django_leasejobs.exceptions.RunCancelled" in content
    assert "Failed" in content


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ("{broken", "the run&#x27;s payload does not parse (JSONDecodeError"),
        ('{"task": 5}', "the run&#x27;s payload is not a task call"),
        ("null", "the run&#x27;s payload is not a task call"),
    ],
)
def test_a2_a_task_run_whose_payload_holds_no_task_call_renders_with_the_reason(
    admin_client, payload, reason
):
    result = tasks.add.enqueue(1, 2)
    Run.objects.filter(pk=result.id).update(payload=payload)
    content = detail(admin_client, result.id)
    assert "Cannot be read as a task result:" in content
    assert reason in content
    assert "the payload holds no task call" in content


def test_a2_a_task_that_no_longer_imports_still_shows_its_call_and_attempts(admin_client):
    result = tasks.add.enqueue(1, 2)
    drive()
    run = Run.objects.get(pk=result.id)
    payload = {**json.loads(run.payload), "task": "tests.tasks.retired", "kwargs": {"x": SCRIPT}}
    Run.objects.filter(pk=run.pk).update(payload=json.dumps(payload))
    content = detail(admin_client, result.id)
    assert "Cannot be read as a task result:" in content
    assert "does not import" in content
    assert pretty([1, 2]) in content
    assert pretty({"x": SCRIPT}) in content
    assert SCRIPT not in content
    assert TaskAttempt.objects.get(run_id=run.pk).worker_id in content
    assert "returned" in content  # its attempt is still read as the one that succeeded


def test_a2_the_detail_reads_no_more_statements_for_more_attempts(admin_client):
    one, many = tasks.add.enqueue(1, 2), tasks.add.enqueue(3, 4)
    for n in range(5):
        TaskAttempt.objects.create(
            run_id=many.id, owner=f"{n:026d}", worker_id=f"lost:{n}:1", began_at=timezone.now()
        )
    drive()
    counts = []
    for result in (one, many):
        with CaptureQueriesContext(connection) as queries:
            detail(admin_client, result.id)
        counts.append(len(queries))
    assert counts[0] == counts[1]


def test_a2_a_run_of_another_job_has_no_task_section(admin_client):
    run = RunFactory(job="tests.walk", instance="tests.tasks.add")
    assert TASK_HEADING not in detail(admin_client, run.pk)
