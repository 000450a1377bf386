"""The operators' admin on rows and requests that once gave a 500 (SPEC §8, §11, §12).

Each test is named for the rule it holds the admin to: A1 the run list, A2 the
run detail, A3 the actions, A5 the schedules. Rows a backend cannot read back
are made with raw SQL, per backend (``connection.vendor``).
"""

from __future__ import annotations

from datetime import timedelta

import django
import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.contrib.messages import WARNING
from django.db import connection
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_leasejobs import RunStatus, start
from django_leasejobs.models import Missed, Run, Schedule
from django_leasejobs.states import MissedAction
from tests.factories import MissedFactory, RunFactory, ScheduleFactory, StepFactory
from tests.utils import nightly

pytestmark = pytest.mark.django_db

RUNS = "/admin/leasejobs/run/"
SCHEDULES = "/admin/leasejobs/schedule/"
MISSED = "/admin/leasejobs/missed/"

#: Deeper than the codec ever writes (MAX_DEPTH = 100) yet decoded on every
#: Python, and deeper than Python's pretty-printer recurses (decoded by some
#: Pythons, 3.13, not by others).
DEPTHS = [200, 2000]


def deep(depth):
    return "[" * depth + "]" * depth


def act(client, url, action, *objects, **extra):
    data = {"action": action, "_selected_action": [obj.pk for obj in objects], **extra}
    return client.post(url, data, follow=True)


def warnings_of(response):
    return [str(m) for m in response.context["messages"] if m.level == WARNING]


# -- A2: values that decode but cannot be pretty-printed ------------------------------------


@pytest.mark.parametrize("depth", DEPTHS)
def test_a2_json_nested_too_deep_to_print_shows_the_raw_text_and_the_reason(admin_client, depth):
    text = deep(depth)
    run = RunFactory(payload=text, cursor=text, counters='{"n": ' + text + "}")
    assert admin_client.get(RUNS).status_code == 200
    response = admin_client.get(f"{RUNS}{run.pk}/change/")
    assert response.status_code == 200
    content = response.content.decode()
    assert content.count("leasejobs-decode-error") == 3
    assert "too deep" in content
    assert text in content


def test_a2_a_lone_surrogate_in_a_value_is_shown_escaped(admin_client):
    """The codec stores one as a \\u escape; pretty-printed raw it could not be sent as UTF-8."""
    run = RunFactory(payload='{"name": "\\ud800"}', counters='{"\\udc80": 1}')
    assert admin_client.get(RUNS).status_code == 200
    response = admin_client.get(f"{RUNS}{run.pk}/change/")
    assert response.status_code == 200
    assert "\\ud800" in response.content.decode()


# -- A1: a counter too large to divide --------------------------------------------------------


@pytest.mark.parametrize(("digits", "share"), [("9" * 400, "100%"), ("-" + "9" * 400, "0%")])
def test_a1_a_counter_too_large_for_a_float_clamps_the_bar(admin_client, digits, share):
    run = RunFactory(counters='{"n": ' + digits + "}", progress_total=10)
    response = admin_client.get(RUNS)
    assert response.status_code == 200
    assert f"{share}</td>" in response.content.decode()
    assert admin_client.get(f"{RUNS}{run.pk}/change/").status_code == 200


def test_a1_counters_without_a_total_are_listed_briefly(admin_client):
    RunFactory(counters='{"n": ' + "9" * 400 + ', "deep": ' + deep(90) + "}")
    response = admin_client.get(RUNS)
    assert response.status_code == 200
    content = response.content.decode()
    assert "9" * 400 not in content
    assert "n=99999999…(400 digits), deep=array" in content


# -- A1, A2: rows the backend cannot read back (SPEC §12) --------------------------------------

#: Per backend: (column, how to corrupt it). SQLite reads a column that is not
#: UTF-8 as an error, and an impossible date as a ValueError; PostgreSQL stores
#: timestamps past year 9999 that psycopg refuses to read.
UNREADABLE = {
    "sqlite": [
        ("payload", "UPDATE leasejobs_run SET {c} = CAST(X'22C3A922FF' AS TEXT) WHERE id = %s"),
        ("instance", "UPDATE leasejobs_run SET {c} = CAST(X'22C3A922FF' AS TEXT) WHERE id = %s"),
        ("started_at", "UPDATE leasejobs_run SET {c} = '2026-02-30 10:00:00' WHERE id = %s"),
    ],
    "postgresql": [
        (
            "next_attempt_at",
            "UPDATE leasejobs_run SET {c} = {c} + interval '8000 years' WHERE id = %s",
        ),
        ("started_at", "UPDATE leasejobs_run SET {c} = {c} + interval '8000 years' WHERE id = %s"),
    ],
}
#: Columns the run list does not read (deferred), so a row bad only there lists normally.
NOT_LISTED = {"payload", "cursor", "rerun_payload", "result", "last_error"}


#: MariaDB refuses to store what it cannot read back, so there the driver's
#: refusal to read a date is played by its converter (``mysql_refuses_year_9999``,
#: tests/conftest.py): the path that contains it is the one a real backend's takes.
UNREADABLE["mysql"] = [
    ("started_at", "UPDATE leasejobs_run SET {c} = '9999-12-31 23:59:59' WHERE id = %s")
]


@pytest.fixture
def unreadable(mysql_refuses_year_9999):
    """Runs the backend cannot read back, as (run, column)."""
    made = []
    for column, sql in UNREADABLE[connection.vendor]:
        run = RunFactory(job="tests.walk", instance=f"bad-{column}")
        with connection.cursor() as cursor:
            cursor.execute(sql.format(c=connection.ops.quote_name(column)), [run.pk])
        made.append((run, column))
    with pytest.raises(Exception):  # noqa: B017, PT011 - each backend raises its own
        list(Run.objects.all())
    return made


def test_a1_the_run_list_shows_rows_it_cannot_read_and_the_others(admin_client, unreadable):
    good = RunFactory(job="tests.noop", instance="readable")
    response = admin_client.get(RUNS)
    assert response.status_code == 200
    content = response.content.decode()
    assert "readable" in content
    assert f'href="{RUNS}{good.pk}/change/' in content
    listed = [run for run, column in unreadable if column not in NOT_LISTED]
    assert listed
    for run, column in unreadable:
        assert f'href="{RUNS}{run.pk}/change/' in content
        assert (f"bad-{column}" in content) is (column in NOT_LISTED)
    assert content.count('class="leasejobs-unreadable"') == len(listed)
    assert "Could not decode" not in content
    assert len(response.context["cl"].result_list) == len(unreadable) + 1


def test_a2_the_detail_of_a_row_it_cannot_read_shows_each_column(admin_client, unreadable):
    for run, column in unreadable:
        response = admin_client.get(f"{RUNS}{run.pk}/change/")
        assert response.status_code == 200, column
        content = response.content.decode()
        assert run.pk in content
        assert "tests.walk" in content
        assert content.count("cannot be read:") == 1, column
        assert str(Run._meta.get_field(column).verbose_name).lower() in content.lower()
        assert "Could not decode" not in content
        assert "with text" not in content


def test_a2_the_page_of_a_row_it_cannot_read_has_the_running_admins_breadcrumbs(
    admin_client, unreadable
):
    """As Django's own pages: ``ol.breadcrumbs`` from Django 6.1, ``div.breadcrumbs`` before."""
    run, _column = unreadable[0]
    content = admin_client.get(f"{RUNS}{run.pk}/change/").content.decode()
    assert "cannot give this run back as a whole" in content
    ol = django.VERSION >= (6, 1)
    assert ('<ol class="breadcrumbs">' in content) is ol
    assert ('<div class="breadcrumbs">' in content) is not ol
    assert (f'<li aria-current="page">{run.pk}</li>' in content) is ol


def test_a3_an_unreadable_row_is_cancelled_and_not_retried(admin_client, unreadable):
    run, column = unreadable[-1]
    assert column == "started_at"
    response = act(admin_client, RUNS, "cancel_runs", run)
    assert response.status_code == 200
    assert "1 run cancelled." in response.content.decode()
    assert Run.objects.filter(pk=run.pk).values_list("status", flat=True).get() == "cancelled"
    response = act(admin_client, RUNS, "retry_runs", run)
    assert response.status_code == 200
    [warning] = warnings_of(response)
    assert f"{run.pk} cannot be read" in warning
    assert Run.objects.count() == len(unreadable)


def test_a5_the_schedule_detail_lists_a_recent_run_it_cannot_read(admin_client, unreadable):
    row = ScheduleFactory(job="tests.walk", expression="0 3 * * *")
    listed = admin_client.get(SCHEDULES)
    assert listed.status_code == 200
    assert ">live run cannot be read</span>" in listed.content.decode()
    response = admin_client.get(f"{SCHEDULES}{row.pk}/change/")
    assert response.status_code == 200
    content = response.content.decode()
    assert "cannot be read: " in content
    for run, _column in unreadable:
        assert run.pk in content


# -- A1, A2: a NUL in a parameter (PostgreSQL refuses NUL in text) ------------------------------


@pytest.mark.parametrize(
    ("url", "param"),
    [
        (RUNS, "job"),
        (RUNS, "q"),
        (RUNS, "status"),
        (RUNS, "instance"),
        (SCHEDULES, "q"),
        (MISSED, "q"),
        (MISSED, "job"),
    ],
)
def test_a1_a_nul_in_a_parameter_redirects_like_an_invalid_lookup(admin_client, url, param):
    RunFactory()
    response = admin_client.get(url, {param: "x\x00y"})
    assert response.status_code == 302
    assert response["Location"] == f"{url}?e=1"


def test_a2_a_nul_in_a_run_id_is_a_run_that_does_not_exist(admin_client):
    response = admin_client.get(f"{RUNS}%00/change/")
    assert response.status_code == 302
    assert response["Location"] == "/admin/"


def test_a3_a_nul_in_a_selected_run_is_refused_without_a_500(admin_client):
    run = RunFactory()
    response = admin_client.post(
        RUNS, {"action": "cancel_runs", "_selected_action": [run.pk, "\x00"]}
    )
    assert response.status_code == 302
    assert response["Location"] == f"{RUNS}?e=1"
    assert Run.objects.get(pk=run.pk).status == RunStatus.RUNNING


# -- A5: schedule rows this process cannot plan -----------------------------------------------


@pytest.fixture
def schedule(define):
    return nightly(define, "t.hard.nightly")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"timezone": "Mars/Olympus"}, "unknown time zone &#x27;Mars/Olympus&#x27;"),
        ({"expression": "0 0 30 2 *"}, "cron expression &#x27;0 0 30 2 *&#x27; cannot be planned"),
        ({"expression": "not cron"}, "cron expression &#x27;not cron&#x27; cannot be planned"),
    ],
)
@pytest.mark.parametrize("has_run", [False, True])
def test_a5_a_schedule_it_cannot_plan_reads_invalid_with_the_reason(
    admin_client, schedule, change, reason, has_run
):
    if has_run:
        change = {**change, "last_run_at": timezone.now(), "last_success_at": timezone.now()}
    Schedule.objects.filter(pk=schedule.pk).update(**change)
    for url in (SCHEDULES, f"{SCHEDULES}{schedule.pk}/change/"):
        response = admin_client.get(url)
        assert response.status_code == 200
        content = response.content.decode()
        assert ">invalid</span>" in content
        assert reason in content


@pytest.fixture
def elsewhere():
    """A schedule row of a job another deployment registers, paused there."""
    now = timezone.now()
    return ScheduleFactory(
        job="other.deployment.job",
        expression="0 3 * * *",
        next_due_at=now - timedelta(days=1),
        paused_at=now - timedelta(days=2),
        paused_by="someone",
    )


@pytest.mark.parametrize(
    ("action", "extra"),
    [("run_now", {}), ("resume_schedules", {}), ("pause_schedules", {"apply": "1"})],
)
def test_a5_actions_on_a_job_not_registered_here_warn_and_change_nothing(
    admin_client, elsewhere, action, extra
):
    if action == "pause_schedules":
        Schedule.objects.filter(pk=elsewhere.pk).update(paused_at=None, paused_by="")
    before = Schedule.objects.filter(pk=elsewhere.pk).values().get()
    response = act(admin_client, SCHEDULES, action, elsewhere, **extra)
    assert response.status_code == 200
    [warning] = warnings_of(response)
    assert "other.deployment.job" in warning
    assert "not registered" in warning
    assert Schedule.objects.filter(pk=elsewhere.pk).values().get() == before
    assert not Run.objects.filter(job="other.deployment.job").exists()


def test_a3_retry_of_a_run_whose_job_is_not_registered_warns(admin_client):
    failed = RunFactory(job="other.deployment.job", status=RunStatus.FAILED)
    response = act(admin_client, RUNS, "retry_runs", failed)
    assert response.status_code == 200
    [warning] = warnings_of(response)
    assert "other.deployment.job" in warning
    assert "not registered" in warning
    assert Run.objects.filter(job="other.deployment.job").count() == 1


def test_a3_retry_refusals_are_reported_and_other_errors_are_not_swallowed(
    admin_client, monkeypatch
):
    live = RunFactory(job="tests.walk")
    response = act(admin_client, RUNS, "retry_runs", live)
    assert "only failed or cancelled runs are retried" in warnings_of(response)[0]

    def broken(run_id, by=None):
        raise ValueError("a bug, not a refusal")

    monkeypatch.setattr("django_leasejobs.operators.retry", broken)
    failed = RunFactory(job="tests.walk", status=RunStatus.FAILED)
    with pytest.raises(ValueError, match="a bug"):
        act(admin_client, RUNS, "retry_runs", failed)


# -- A5: per-request state, not per admin instance --------------------------------------------


def test_a5_each_request_reads_its_own_live_runs(schedule):
    """Two requests served by one ScheduleAdmin (as threads of one server) keep apart."""
    model_admin = admin.site._registry[Schedule]
    user = User.objects.create_superuser("root", password="pw")

    def changelist():
        request = RequestFactory().get(SCHEDULES)
        request.user = user
        return model_admin.get_changelist_instance(request)

    before = changelist()
    start("t.hard.nightly")
    after = changelist()
    [old] = [row for row in before.result_list if row.job == "t.hard.nightly"]
    [new] = [row for row in after.result_list if row.job == "t.hard.nightly"]
    assert ">running</span>" in model_admin.state_display(new)
    assert ">never run</span>" in model_admin.state_display(old)


# -- A1: what a list page reads ----------------------------------------------------------------


def test_a1_the_run_list_reads_no_payload_cursor_or_error(admin_client):
    big = "x" * 10_000
    run = RunFactory(payload=f'"{big}"', cursor='{"page": 7}', last_error="boom")
    quoted = {name: connection.ops.quote_name(name) for name in ("job", *sorted(NOT_LISTED))}
    with CaptureQueriesContext(connection) as queries:
        assert admin_client.get(RUNS).status_code == 200
    page = [q["sql"] for q in queries if "leasejobs_run" in q["sql"] and quoted["job"] in q["sql"]]
    assert page
    for sql in page:
        for name in NOT_LISTED:
            assert quoted[name] not in sql, name
    detail = admin_client.get(f"{RUNS}{run.pk}/change/").content.decode()
    assert big in detail
    assert "&quot;page&quot;: 7" in detail
    assert "boom" in detail


def test_a1_the_run_list_lists_queues_without_a_distinct_over_the_table(admin_client, define):
    # Django's own filter for a field reads SELECT DISTINCT over every retained run.
    define("t.a1.mail", lambda p: p.done(), queue="mail")
    RunFactory(queue="mail")
    RunFactory(queue="other")
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(RUNS)
    assert response.status_code == 200
    assert not [q["sql"] for q in queries if "DISTINCT" in q["sql"].upper()]
    content = response.content.decode()
    assert "?queue=mail" in content
    assert "?queue=default" in content
    filtered = admin_client.get(f"{RUNS}?queue=other")
    assert filtered.status_code == 200
    assert filtered.context["cl"].result_count == 1


def test_a1_the_missed_list_links_runs_without_joining_them(admin_client):
    run = RunFactory(job="tests.nightly")
    MissedFactory(job="tests.nightly", action=MissedAction.CAUGHT_UP, run=run)
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(MISSED)
    assert response.status_code == 200
    assert f'href="{RUNS}{run.pk}/change/"' in response.content.decode()
    run_table = connection.ops.quote_name("leasejobs_run")
    assert not [q["sql"] for q in queries if run_table in q["sql"]]
    missed = Missed.objects.get()
    with CaptureQueriesContext(connection) as queries:
        detail = admin_client.get(f"{MISSED}{missed.pk}/change/")
    assert detail.status_code == 200
    assert f'href="{RUNS}{run.pk}/change/"' in detail.content.decode()
    assert not [q["sql"] for q in queries if run_table in q["sql"]]


def test_a2_a_step_ledger_it_cannot_read_is_named_not_a_500(admin_client, mysql_refuses_year_9999):
    step = StepFactory(name="fetch")
    sql = {
        "sqlite": "UPDATE leasejobs_step SET name = CAST(X'22C3A922FF' AS TEXT) WHERE id = %s",
        "postgresql": (
            "UPDATE leasejobs_step SET recorded_at = recorded_at + interval '8000 years' "
            "WHERE id = %s"
        ),
        "mysql": "UPDATE leasejobs_step SET recorded_at = '9999-12-31 23:59:59' WHERE id = %s",
    }[connection.vendor]
    with connection.cursor() as cursor:
        cursor.execute(sql, [step.pk])
    response = admin_client.get(f"{RUNS}{step.run_id}/change/", follow=True)
    assert response.status_code == 200
    assert "The step ledger cannot be read" in response.content.decode()
