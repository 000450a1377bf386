"""The queue controls (SPEC O5, W6): pause and resume behind a confirmation, for
``leasejobs.change_run``; the paused queues' read-only list; LogEntry; bad names."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import ADDITION, DELETION, LogEntry
from django.test import Client

from django_leasejobs import RunStatus, pause_queue, start
from django_leasejobs.models import PausedQueue
from tests.utils import fresh, user_with

pytestmark = pytest.mark.django_db

OVERVIEW = "/admin/leasejobs/pausedqueue/overview/"
PAUSE = "/admin/leasejobs/pausedqueue/pause/"
RESUME = "/admin/leasejobs/pausedqueue/resume/"
PAUSED = "/admin/leasejobs/pausedqueue/"


@pytest.fixture
def operator(client):
    """A staff user who may see the runs and change how they are driven."""
    client.force_login(user_with("view_run", "change_run"))
    return client


@pytest.fixture
def viewer(client):
    """A staff user who may see the runs and nothing more."""
    client.force_login(user_with("view_run", username="viewer"))
    return client


def messages_of(response):
    return [str(message) for message in response.context["messages"]]


# -- pause -----------------------------------------------------------------------------------


def test_o5_w6_a_get_of_the_pause_asks_for_a_note_and_pauses_nothing(operator):
    response = operator.get(PAUSE, {"queue": "mail"})
    assert response.status_code == 200
    text = response.content.decode()
    assert 'name="note"' in text
    assert 'maxlength="200"' in text
    assert 'method="post"' in text
    assert 'name="csrfmiddlewaretoken"' in text
    assert not PausedQueue.objects.exists()


def test_o5_w6_the_confirmed_pause_pauses_says_so_and_logs_the_rows_addition(operator):
    response = operator.post(PAUSE, {"queue": "mail", "note": "SMTP relay down"}, follow=True)
    assert response.redirect_chain == [(OVERVIEW, 302)]
    assert messages_of(response) == ["Queue mail paused."]
    row = PausedQueue.objects.get()
    assert (row.queue, row.paused_by, row.note) == ("mail", "operator", "SMTP relay down")
    entry = LogEntry.objects.get()
    assert (entry.action_flag, entry.object_id) == (ADDITION, str(row.pk))
    assert entry.change_message == "Paused: SMTP relay down"
    assert entry.user.username == "operator"


def test_o5_w6_a_second_pause_says_already_paused_keeps_the_first_note_and_logs_nothing(operator):
    assert pause_queue("mail", by="alice", note="first")
    response = operator.post(PAUSE, {"queue": "mail", "note": "second"}, follow=True)
    assert messages_of(response) == [
        "Queue mail is already paused (by alice): nothing was changed."
    ]
    assert PausedQueue.objects.get().note == "first"
    assert not LogEntry.objects.exists()


def test_o5_a_note_longer_than_200_characters_is_refused_and_nothing_is_paused(operator):
    response = operator.post(PAUSE, {"queue": "mail", "note": "x" * 201})
    assert response.status_code == 200  # the confirmation again, saying why
    assert "A note is at most 200 characters." in response.content.decode()
    assert not PausedQueue.objects.exists()


# -- resume ----------------------------------------------------------------------------------


def test_o5_w6_resume_asks_first_then_resumes_and_logs_the_rows_deletion(operator):
    assert pause_queue("mail", by="alice", note="SMTP relay down")
    row = PausedQueue.objects.get()
    asked = operator.get(RESUME, {"queue": "mail"})
    assert asked.status_code == 200
    assert "SMTP relay down" in asked.content.decode()
    assert PausedQueue.objects.exists()  # a GET only asks

    response = operator.post(RESUME, {"queue": "mail"}, follow=True)
    assert response.redirect_chain == [(OVERVIEW, 302)]
    assert messages_of(response) == ["Queue mail resumed."]
    assert not PausedQueue.objects.exists()
    entry = LogEntry.objects.get()
    assert (entry.action_flag, entry.object_id) == (DELETION, str(row.pk))
    assert entry.object_repr == str(row)

    again = operator.post(RESUME, {"queue": "mail"}, follow=True)
    assert messages_of(again) == ["Queue mail is not paused: nothing was changed."]
    assert LogEntry.objects.count() == 1


def test_w6_a_queue_paused_in_the_admin_is_not_driven_until_resumed_there(operator, define, drive):
    spec = define("t.admin.queues", lambda p: p.done())
    held = start(spec, instance="m", queue="mail").run
    other = start(spec, instance="r", queue="reports").run
    operator.post(PAUSE, {"queue": "mail", "note": "maintenance"})

    report = drive(spec)
    assert (report.attempted, report.completed) == (1, 1)
    assert fresh(other).status == RunStatus.DONE
    stored = fresh(held)
    assert (stored.status, stored.attempts, stored.lease_owner) == (RunStatus.RUNNING, 0, None)

    operator.post(RESUME, {"queue": "mail"})
    assert drive(spec).completed == 1
    assert fresh(held).status == RunStatus.DONE


# -- permissions and CSRF --------------------------------------------------------------------


def test_o5_without_change_run_the_queues_are_shown_without_buttons(viewer):
    pause_queue("mail", by="alice")
    page = viewer.get(OVERVIEW).content.decode()
    assert 'data-queue="mail"' in page
    assert 'data-queue="default"' in page
    assert "button leasejobs-pause" not in page
    assert "button leasejobs-resume" not in page
    assert PAUSE not in page
    assert RESUME not in page


@pytest.mark.parametrize(
    ("method", "url", "data"),
    [
        ("get", PAUSE, {"queue": "mail"}),
        ("post", PAUSE, {"queue": "mail", "note": "forged"}),
        ("get", RESUME, {"queue": "paused"}),
        ("post", RESUME, {"queue": "paused"}),
        ("post", PAUSED, {"action": "resume_queues"}),
    ],
)
def test_o5_without_change_run_a_forged_request_gets_403_and_changes_nothing(
    viewer, method, url, data
):
    pause_queue("paused", by="alice")
    if "action" in data:  # the list's action, on the paused row
        data = {**data, "_selected_action": [PausedQueue.objects.get().pk]}
    response = getattr(viewer, method)(url, data)
    assert response.status_code == 403
    assert list(PausedQueue.objects.values_list("queue", flat=True)) == ["paused"]
    assert not LogEntry.objects.exists()


def test_o5_the_pause_needs_the_csrf_token():
    client = Client(enforce_csrf_checks=True)
    client.force_login(user_with("view_run", "change_run"))
    assert client.post(PAUSE, {"queue": "mail"}).status_code == 403
    assert not PausedQueue.objects.exists()


def test_o5_an_anonymous_request_is_sent_to_the_login(client):
    response = client.post(PAUSE, {"queue": "mail"})
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")
    assert not PausedQueue.objects.exists()


# -- bad names (§11) -------------------------------------------------------------------------


@pytest.mark.parametrize("queue", ["", "q" * 101, "a\x00b", None])
@pytest.mark.parametrize(
    ("method", "url"), [("get", PAUSE), ("post", PAUSE), ("get", RESUME), ("post", RESUME)]
)
def test_o5_s11_a_bad_queue_name_is_refused_with_a_message_never_a_500(
    operator, method, url, queue
):
    data = {} if queue is None else {"queue": queue}
    response = getattr(operator, method)(url, data, follow=True)
    assert response.status_code == 200
    assert response.redirect_chain == [(OVERVIEW, 302)]
    (message,) = messages_of(response)
    assert message.startswith("Nothing was changed: ")
    assert not PausedQueue.objects.exists()
    assert not LogEntry.objects.exists()


# -- the paused queues' list (W6) ------------------------------------------------------------


def test_w6_the_paused_queues_list_shows_who_when_and_why_and_cannot_be_edited(operator):
    pause_queue("mail", by="alice", note="SMTP relay down")
    row = PausedQueue.objects.get()
    listed = operator.get(PAUSED)
    assert listed.status_code == 200
    text = listed.content.decode()
    for shown in ("mail", "alice", "SMTP relay down", f'href="{OVERVIEW}"'):
        assert shown in text
    assert list(listed.context["cl"].list_display)[1:] == [
        "queue",
        "paused_by",
        "paused_at_display",  # written as every time the admin shows (A8)
        "note",
    ]
    detail = operator.get(f"{PAUSED}{row.pk}/change/")  # read-only: no save, no delete
    assert detail.status_code == 200
    assert 'name="_save"' not in detail.content.decode()
    assert "deletelink" not in detail.content.decode()
    assert operator.get(f"{PAUSED}add/").status_code == 403
    assert operator.post(f"{PAUSED}{row.pk}/change/", {"note": "edited"}).status_code == 403
    assert operator.post(f"{PAUSED}{row.pk}/delete/", {"post": "yes"}).status_code == 403
    assert "delete_selected" not in text
    assert PausedQueue.objects.get().note == "SMTP relay down"


def test_w6_the_lists_resume_action_goes_through_the_same_confirmation(operator):
    pause_queue("mail", by="alice")
    pause_queue("reports", by="bob")
    rows = list(PausedQueue.objects.order_by("queue"))
    asked = operator.post(
        PAUSED, {"action": "resume_queues", "_selected_action": [row.pk for row in rows]}
    )
    assert asked.status_code == 200  # the confirmation, not the resume
    text = asked.content.decode()
    assert f'action="{RESUME}"' in text
    assert 'name="from" value="list"' in text
    assert PausedQueue.objects.count() == 2

    response = operator.post(RESUME, {"queue": ["mail", "reports"], "from": "list"}, follow=True)
    assert response.redirect_chain == [(PAUSED, 302)]
    assert messages_of(response) == ["Queue mail resumed.", "Queue reports resumed."]
    assert not PausedQueue.objects.exists()
    logged = LogEntry.objects.filter(action_flag=DELETION)
    assert sorted(logged.values_list("object_id", flat=True)) == sorted(str(r.pk) for r in rows)


def test_w6_a_viewer_sees_the_list_without_the_resume_action(viewer):
    pause_queue("mail", by="alice")
    listed = viewer.get(PAUSED)
    assert listed.status_code == 200
    assert "resume_queues" not in listed.content.decode()
