"""The operators' admin (SPEC §8): decoded data, actions, permissions, escaping."""

from __future__ import annotations

import django
import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User

from django_leasejobs import RunStatus, start
from django_leasejobs.models import Run, Schedule
from tests.factories import RunFactory, StepFactory
from tests.utils import nightly

pytestmark = pytest.mark.django_db

RUNS = "/admin/leasejobs/run/"
SCHEDULES = "/admin/leasejobs/schedule/"


@pytest.fixture
def staff(client):
    """A staff user who may view runs and schedules, and nothing more."""
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_run", "view_schedule", "view_step"])
    )
    client.force_login(user)
    return user


@pytest.fixture
def schedule(define):
    return nightly(define, "t.admin.nightly")


def test_a1_list_shows_status_progress_failure_and_holder(admin_client):
    RunFactory(job="tests.walk", counters='{"imported": 250}', progress_total=1000)
    RunFactory(job="tests.walk", status=RunStatus.FAILED, failure_code="handler_failed")
    content = admin_client.get(RUNS).content.decode()
    assert "leasejobs-progress" in content
    assert "25%" in content
    assert "handler_failed" in content
    assert "leasejobs-status" in content


def test_a2_detail_decodes_and_pretty_prints_payload_cursor_counters(admin_client):
    run = RunFactory(payload='{"source":"crm"}', cursor='{"page":7}', counters='{"imported":70}')
    content = admin_client.get(f"{RUNS}{run.pk}/change/").content.decode()
    assert "&quot;page&quot;: 7" in content
    assert "&quot;source&quot;: &quot;crm&quot;" in content
    assert "&quot;imported&quot;: 70" in content


def test_a2_r3_a_run_whose_handler_forgets_to_return_says_so_on_its_page(admin_client):
    """R3 + issue 18: after IDLE_PASSES_WARN passes that changed nothing, the run's page
    says so, as the drive's warnings and the log did once."""
    from django_leasejobs.passes import IDLE_PASSES_WARN

    idle = RunFactory(idle_passes=IDLE_PASSES_WARN)
    busy = RunFactory(idle_passes=IDLE_PASSES_WARN - 1)
    content = admin_client.get(f"{RUNS}{idle.pk}/change/").content.decode()
    assert "leasejobs-idle" in content
    assert "forget to return p.advance(cursor) or p.done()?" in content
    assert "leasejobs-idle" not in admin_client.get(f"{RUNS}{busy.pk}/change/").content.decode()


def test_a2_a_malformed_row_shows_its_raw_text_and_the_decode_error(admin_client):
    run = RunFactory(payload="{broken", cursor="[1,")
    response = admin_client.get(f"{RUNS}{run.pk}/change/")
    assert response.status_code == 200
    content = response.content.decode()
    assert content.count("leasejobs-decode-error") == 2
    assert "{broken" in content
    assert "JSONDecodeError" in content


def test_a2_no_cursor_is_said_not_blank(admin_client):
    run = RunFactory(cursor=None)
    content = admin_client.get(f"{RUNS}{run.pk}/change/").content.decode()
    assert "no pass has committed yet" in content


def test_a2_failure_code_with_its_meaning_and_the_step_ledger(admin_client):
    run = RunFactory(status=RunStatus.FAILED, failure_code="step_exhausted", last_error="boom")
    StepFactory(run=run, name="fetch:3", result=None, attempts=5, last_error="timeout")
    content = admin_client.get(f"{RUNS}{run.pk}/change/").content.decode()
    assert "A step failed as many times as its retry policy allows." in content
    assert "fetch:3" in content


def test_script_in_a_payload_renders_inert(admin_client):
    run = RunFactory(payload='{"name": "<script>alert(1)</script>"}')
    content = admin_client.get(f"{RUNS}{run.pk}/change/").content.decode()
    assert "<script>alert(1)</script>" not in content
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in content


def test_a4_held_runs_are_counted_and_filterable(admin_client):
    RunFactory(status=RunStatus.HELD, failure_code="interrupted")
    RunFactory()
    response = admin_client.get(RUNS)
    assert "1 run is held and waits for a decision" in response.content.decode()
    held = admin_client.get(RUNS, {"held": "yes"})
    assert held.context["cl"].result_count == 1


def test_a6_nothing_the_protocol_owns_is_editable(admin_client):
    run = RunFactory()
    response = admin_client.post(f"{RUNS}{run.pk}/change/", {"cursor": '"evil"'})
    assert response.status_code == 403
    assert Run.objects.get(pk=run.pk).cursor is None
    # Revision 4 (A9): the run's add view starts a run through start(); it is no model form.
    add = admin_client.get(f"{RUNS}add/")
    assert add.templates[0].name == "admin/leasejobs/run/start.html"
    assert 'name="cursor"' not in add.content.decode()
    assert admin_client.post(f"{RUNS}add/", {"cursor": '"evil"'}).status_code == 200  # a chooser
    assert Run.objects.count() == 1
    assert admin_client.get(f"{SCHEDULES}add/").status_code == 403
    assert admin_client.get("/admin/leasejobs/missed/add/").status_code == 403


@pytest.mark.parametrize("model", ["run", "schedule", "missed"])
def test_a1_a5_every_list_opens(admin_client, drive, model):
    drive()  # creates the schedule rows
    start("tests.walk")
    assert admin_client.get(f"/admin/leasejobs/{model}/").status_code == 200


# -- A3: actions -------------------------------------------------------------------------


def act(client, url, action, *objects, **extra):
    data = {"action": action, "_selected_action": [obj.pk for obj in objects], **extra}
    return client.post(url, data, follow=True)


def test_a3_cancel_says_what_happened_and_is_logged(admin_client):
    live = RunFactory()
    finished = RunFactory(status=RunStatus.DONE)
    response = act(admin_client, RUNS, "cancel_runs", live, finished)
    text = response.content.decode()
    assert "1 run cancelled." in text
    assert "1 run left as it was: already finished." in text
    assert Run.objects.get(pk=live.pk).status == RunStatus.CANCELLED
    assert LogEntry.objects.filter(object_id=live.pk, change_message="Cancelled").exists()


def test_a3_retry_starts_a_new_run(admin_client):
    failed = RunFactory(job="tests.walk", instance="x", status=RunStatus.FAILED)
    response = act(admin_client, RUNS, "retry_runs", failed)
    assert "1 run started again." in response.content.decode()
    assert Run.objects.filter(job="tests.walk", instance="x", status=RunStatus.RUNNING).exists()


@pytest.mark.parametrize(
    ("action", "status"), [("release_resume", "running"), ("release_fail", "failed")]
)
def test_a3_release_a_held_run(admin_client, action, status):
    held = RunFactory(status=RunStatus.HELD, failure_code="interrupted")
    act(admin_client, RUNS, action, held)
    assert Run.objects.get(pk=held.pk).status == status


def test_a5_schedule_list_shows_cron_in_words_state_and_next_due(admin_client, schedule):
    content = admin_client.get(SCHEDULES).content.decode()
    assert "At 03:00 (0 3 * * *)" in content
    assert "never run" in content
    assert "Europe/Paris" in content


def test_a5_pause_asks_for_a_note_then_pauses_and_resume_resumes(admin_client, schedule):
    form = act(admin_client, SCHEDULES, "pause_schedules", schedule)
    assert 'name="note"' in form.content.decode()
    done = act(admin_client, SCHEDULES, "pause_schedules", schedule, apply="1", note="vendor down")
    assert "1 schedule paused." in done.content.decode()
    paused = Schedule.objects.get(pk=schedule.pk)
    assert (paused.paused_by, paused.pause_note) == ("admin", "vendor down")
    again = act(admin_client, SCHEDULES, "pause_schedules", schedule, apply="1")
    assert "already paused" in again.content.decode()
    resumed = act(admin_client, SCHEDULES, "resume_schedules", schedule)
    assert "1 schedule resumed." in resumed.content.decode()
    assert LogEntry.objects.filter(object_id=str(schedule.pk)).count() == 2


def test_a5_the_pause_page_has_the_breadcrumbs_the_running_admin_styles(admin_client, schedule):
    """Django 6.1 styles ``ol.breadcrumbs`` and no longer ``div.breadcrumbs`` (its CSS names
    the element): the page writes the one the running Django styles."""
    content = act(admin_client, SCHEDULES, "pause_schedules", schedule).content.decode()
    ol = django.VERSION >= (6, 1)
    assert ('<ol class="breadcrumbs">' in content) is ol
    assert ('<div class="breadcrumbs">' in content) is not ol
    assert ('<li aria-current="page">Pause</li>' in content) is ol
    assert f'<a href="{SCHEDULES}">Schedules</a>' in content


def test_a5_run_now_and_its_refusal(admin_client, schedule):
    first = act(admin_client, SCHEDULES, "run_now", schedule)
    assert "started run" in first.content.decode()
    second = act(admin_client, SCHEDULES, "run_now", schedule)
    assert "already has a live run" in second.content.decode()


def test_a5_schedule_detail_shows_recent_runs_and_the_missed_ledger(admin_client, schedule):
    start("t.admin.nightly")
    content = admin_client.get(f"{SCHEDULES}{schedule.pk}/change/").content.decode()
    assert "recent runs" in content.lower()
    assert "missed due times" in content.lower()


# -- permissions ---------------------------------------------------------------------------


def test_staff_without_the_permissions_sees_no_actions(client, staff):
    RunFactory()
    content = client.get(RUNS).content.decode()
    assert "cancel_runs" not in content
    assert "retry_runs" not in content
    assert "release_resume" not in content


@pytest.mark.parametrize("action", ["cancel_runs", "retry_runs", "release_resume", "release_fail"])
def test_a_forged_run_action_post_is_forbidden(client, staff, action):
    run = RunFactory(status=RunStatus.HELD)
    response = client.post(RUNS, {"action": action, "_selected_action": [run.pk]})
    assert response.status_code == 403
    assert Run.objects.get(pk=run.pk).status == RunStatus.HELD


@pytest.mark.parametrize("action", ["pause_schedules", "resume_schedules", "run_now"])
def test_a_forged_schedule_action_post_is_forbidden(client, staff, schedule, action):
    response = client.post(
        SCHEDULES, {"action": action, "_selected_action": [schedule.pk], "apply": "1"}
    )
    assert response.status_code == 403
    assert Schedule.objects.get(pk=schedule.pk).paused_at is None


def test_the_permission_unlocks_its_action_only(client, staff):
    staff.user_permissions.add(Permission.objects.get(codename="cancel_run"))
    content = client.get(RUNS).content.decode()
    assert "cancel_runs" in content
    assert "retry_runs" not in content


def test_actions_need_the_csrf_token(staff):
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(staff)
    run = RunFactory()
    response = strict.post(RUNS, {"action": "cancel_runs", "_selected_action": [run.pk]})
    assert response.status_code == 403


def test_a1_search_by_exact_id_job_or_instance(admin_client):
    wanted = RunFactory(job="tests.walk", instance="tenant-42")
    RunFactory(job="tests.noop", instance="tenant-7")
    by_id = admin_client.get(RUNS, {"q": wanted.pk.lower()})
    assert [r.pk for r in by_id.context["cl"].result_list] == [wanted.pk]
    by_instance = admin_client.get(RUNS, {"q": "tenant-42"})
    assert [r.pk for r in by_instance.context["cl"].result_list] == [wanted.pk]
    by_job = admin_client.get(RUNS, {"q": "tests.walk"})
    assert [r.pk for r in by_job.context["cl"].result_list] == [wanted.pk]
