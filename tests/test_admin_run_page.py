"""The run page and the run list for an operator at 3 a.m. (SPEC §8 A7 revision 3, issue 20).

* the run page's buttons: the actions valid for the run, with the list's
  permissions, behind a confirmation (POST + CSRF; a GET never acts),
  through the operator functions, reported and logged as the list does;
* a retry's message links to the new run, from the list and from the page;
* the list's "next due" column (and the pure function behind it);
* long JSON values folded; schedule times that name their zone.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.contrib.messages import INFO, SUCCESS, WARNING
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_leasejobs import operators
from django_leasejobs.admin.folds import FOLD_CHARS, described, is_long, size
from django_leasejobs.admin.next_due import DueReason, next_due
from django_leasejobs.models import PausedQueue, Run
from django_leasejobs.states import FailureCode, RunStatus, Throttle
from django_leasejobs.times import zoned
from tests.factories import RunFactory, ScheduleFactory, StepFactory

RUNS = "/admin/leasejobs/run/"
SCHEDULES = "/admin/leasejobs/schedule/"
NOW = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)
OWNER = "01JQ0LEASEOWNER00000000000"

db = pytest.mark.django_db


def page(run_id: str) -> str:
    return f"{RUNS}{run_id}/change/"


def act_url(run_id: str, verb: str) -> str:
    return f"{RUNS}{run_id}/{verb}/"


def buttons(content: str, run_id: str) -> list[str]:
    """The verbs of the run page's buttons, in order."""
    verbs = ["cancel", "retry", "release-resume", "release-fail"]
    found = [(content.find(f'href="{act_url(run_id, verb)}"'), verb) for verb in verbs]
    return [verb for at, verb in sorted(found) if at >= 0]


def said(response, level=None) -> list[str]:
    return [str(m) for m in response.context["messages"] if level is None or m.level == level]


def entries(run: Run) -> list[str]:
    return [e.get_change_message() for e in LogEntry.objects.filter(object_id=run.pk)]


def held_run(**extra) -> Run:
    return RunFactory(status=RunStatus.HELD, failure_code=FailureCode.INTERRUPTED, **extra)


# -- next due: the pure function, one case each (A7, C5) --------------------------------------


def row(**columns) -> Run:
    """A run as the list reads it, never saved: started an hour ago, touched since."""
    values = {
        "status": RunStatus.RUNNING,
        "started_at": NOW - timedelta(hours=1),
        "updated_at": NOW - timedelta(minutes=1),
        "next_attempt_at": NOW,
    }
    return Run(**{**values, **columns})


SOON = NOW + timedelta(minutes=2)
PAST = NOW - timedelta(minutes=2)


def case(name: str, reason: DueReason, at: datetime | None, **columns):
    """A row with *columns* (over :func:`row`'s) that next_due says is *reason*, at *at*."""
    return pytest.param(columns, reason, at, id=name)


@pytest.mark.parametrize(
    ("columns", "reason", "at"),
    [
        case("due-now", DueReason.DUE_NOW, NOW),
        case("overdue", DueReason.DUE_NOW, PAST, next_attempt_at=PAST),
        case(
            "retry-back-off",
            DueReason.RETRY,
            SOON,
            attempts=2,
            failure_code="handler_failed",
            next_attempt_at=SOON,
        ),
        case(
            "run-after",
            DueReason.RUN_AFTER,
            NOW + timedelta(hours=1),
            started_at=NOW,
            updated_at=NOW,
            next_attempt_at=NOW + timedelta(hours=1),
        ),
        case("deferred", DueReason.DEFERRED, SOON, next_attempt_at=SOON),
        case("claim-back-off", DueReason.ADMISSION, SOON, admission_misses=2, next_attempt_at=SOON),
        case(
            "rate-limit-before-a-back-off",
            DueReason.RATE,
            SOON,
            throttled_by=Throttle.RATE,
            next_attempt_at=SOON,
            attempts=1,
        ),
        case(
            "concurrency-even-when-due",
            DueReason.CONCURRENCY,
            PAST,
            throttled_by=Throttle.CONCURRENCY,
            next_attempt_at=PAST,
        ),
        case(
            "leased",
            DueReason.LEASED,
            SOON,
            lease_owner=OWNER,
            lease_began_at=PAST,
            next_attempt_at=SOON,
        ),
        case("claimed", DueReason.CLAIMED, SOON, lease_owner=OWNER, next_attempt_at=SOON),
        case(
            "lease-expired",
            DueReason.LEASE_EXPIRED,
            PAST,
            lease_owner=OWNER,
            lease_began_at=PAST,
            next_attempt_at=PAST,
        ),
        case("held", DueReason.HELD, None, status=RunStatus.HELD, next_attempt_at=None),
        case("never-due", DueReason.NEVER_DUE, None, next_attempt_at=None),
        case(
            "cancelled-mid-pass",
            DueReason.STOPPING,
            SOON,
            status=RunStatus.CANCELLED,
            next_attempt_at=SOON,
        ),
        case("cancelled", DueReason.NONE, None, status=RunStatus.CANCELLED, next_attempt_at=None),
        case("done", DueReason.NONE, None, status=RunStatus.DONE, next_attempt_at=None),
        case(
            "failed",
            DueReason.NONE,
            None,
            status=RunStatus.FAILED,
            attempts=5,
            next_attempt_at=None,
        ),
    ],
)
def test_a7_next_due_says_why_from_the_rows_columns(columns, reason, at):
    due = next_due(row(**columns), NOW)
    assert (due.reason, due.at) == (reason, at)


def test_a7_next_due_a_paused_queue_holds_every_unleased_run_but_not_a_pass_in_flight():
    assert next_due(row(), NOW, paused=True).reason == DueReason.QUEUE_PAUSED
    throttled = row(throttled_by=Throttle.RATE, next_attempt_at=SOON)
    assert next_due(throttled, NOW, paused=True).reason == DueReason.QUEUE_PAUSED
    leased = row(lease_owner=OWNER, lease_began_at=PAST, next_attempt_at=SOON)
    assert next_due(leased, NOW, paused=True).reason == DueReason.LEASED


# -- the list: next due, the compact columns (A7, A1) ----------------------------------------


def live_runs_waiting_for_everything() -> dict[str, Run]:
    now = timezone.now()
    return {
        "retry": RunFactory(
            attempts=3,
            failure_code="handler_failed",
            started_at=now - timedelta(hours=1),
            updated_at=now,
            next_attempt_at=now + timedelta(minutes=2),
        ),
        "run_after": RunFactory(next_attempt_at=now + timedelta(hours=1)),
        "rate": RunFactory(
            job="tests.rated",
            throttled_by=Throttle.RATE,
            updated_at=now + timedelta(seconds=1),
            next_attempt_at=now + timedelta(seconds=40),
        ),
        "leased": RunFactory(
            lease_owner=OWNER,
            lease_holder="worker-2:4182:1767225600",
            lease_began_at=now,
            next_attempt_at=now + timedelta(minutes=4),
        ),
        "held": held_run(),
        "due": RunFactory(),
        "failed": RunFactory(status=RunStatus.FAILED, attempts=5, failure_code="timeout"),
    }


def cell(content: str, run: Run, field: str) -> str:
    """The HTML of one cell of *run*'s row in the run list."""
    start = content.index(f'value="{run.pk}"')
    start = content.index(f'class="field-{field}"', start)
    return content[start : content.index("</td>", start)]


@db
def test_a7_the_list_says_when_and_why_each_live_run_is_next_due(admin_client):
    runs = live_runs_waiting_for_everything()
    content = admin_client.get(RUNS).content.decode()
    assert "column-next_due_display" in content
    due = {name: cell(content, run, "next_due_display") for name, run in runs.items()}
    assert "leasejobs-due-retry" in due["retry"]
    assert ">in 1 min 59 s</time>" in due["retry"] or ">in 2 min</time>" in due["retry"]
    assert "(after 3 failed passes: handler_failed)" in due["retry"]
    assert "first pass <time" in due["run_after"]
    assert "(run after)" in due["run_after"]
    assert "waiting for its rate limit, until <time" in due["rate"]
    assert "running now on worker-2 pid 4182, lease until <time" in due["leased"]
    assert "waiting for an operator (release: resume or fail)" in due["held"]
    assert "due now" in due["due"]
    assert "not due: 5 failed passes in a row" in due["failed"]
    # A retrying run and one due in an hour still read "Running", and no longer alike.
    assert cell(content, runs["retry"], "status_display").endswith(">Running</span>")
    assert cell(content, runs["run_after"], "status_display").endswith(">Running</span>")


@db
def test_a7_next_due_says_a_paused_queue_holds_the_run(admin_client):
    run = RunFactory(queue="mail")
    PausedQueue.objects.create(queue="mail", paused_by="ops", paused_at=timezone.now())
    content = admin_client.get(RUNS).content.decode()
    assert "queue mail is paused" in cell(content, run, "next_due_display")
    assert "queue mail is paused" in admin_client.get(page(run.pk)).content.decode()


@db
def test_a7_next_due_costs_no_statement_per_row(admin_client):
    live_runs_waiting_for_everything()
    with CaptureQueriesContext(connection) as few:
        response = admin_client.get(RUNS)
    assert response.content.decode().count('class="leasejobs-due ') == 7
    for _ in range(3):
        live_runs_waiting_for_everything()
    with CaptureQueriesContext(connection) as many:
        response = admin_client.get(RUNS)
    assert response.content.decode().count('class="leasejobs-due ') == 28
    assert len(many) == len(few), [q["sql"] for q in many]


@db
def test_a7_the_list_shows_a_short_id_with_the_whole_id_and_one_times_column(admin_client):
    run = RunFactory(status=RunStatus.DONE, counters='{"rows": 3}')
    content = admin_client.get(RUNS).content.decode()
    assert f'<span class="leasejobs-id" title="{run.pk}">{run.pk}</span>' in content
    assert "leasejobs/runs.css" in content  # what shows it short and keeps it in view
    for gone in ("started_at", "updated_at", "ended_at", "duration_display", "lease_display"):
        assert f"column-{gone}" not in content
    times = cell(content, run, "times_display")
    assert "started <time" in times
    assert "ended <time" in times
    assert "took " in times
    assert f'title="{run.started_at:%Y-%m-%d %H:%M:%S} UTC"' in times


@db
def test_a7_the_queue_column_names_a_priority_only_when_it_is_not_the_default(admin_client):
    plain = RunFactory(queue="mail")
    urgent = RunFactory(queue="mail", priority=5)
    content = admin_client.get(RUNS).content.decode()
    assert cell(content, plain, "queue_display").endswith(">mail")
    assert cell(content, urgent, "queue_display").endswith(">mail, priority +5")


# -- the run page's buttons (A7, A3) ---------------------------------------------------------


def cancelled_mid_pass() -> Run:
    run = RunFactory(lease_owner=OWNER, lease_began_at=timezone.now())
    Run.objects.filter(pk=run.pk).update(next_attempt_at=timezone.now() + timedelta(minutes=5))
    assert operators.cancel(run.pk)
    return Run.objects.get(pk=run.pk)


@db
@pytest.mark.parametrize(
    ("make", "offered"),
    [
        (RunFactory, ["cancel"]),
        (held_run, ["cancel", "release-resume", "release-fail"]),
        (lambda: RunFactory(status=RunStatus.FAILED), ["retry"]),
        (lambda: RunFactory(status=RunStatus.CANCELLED), ["retry"]),
        (cancelled_mid_pass, ["retry"]),  # it keeps its key, but is cancelled already
    ],
    ids=["running", "held", "failed", "cancelled", "cancelled-mid-pass"],
)
def test_a7_the_run_page_offers_the_actions_valid_for_the_run(admin_client, make, offered):
    run = make()
    content = admin_client.get(page(run.pk)).content.decode()
    assert buttons(content, run.pk) == offered
    assert content.count('class="leasejobs-action ') == len(offered)


@db
def test_a7_a_done_run_offers_no_button_where_a_failed_one_offers_retry(admin_client):
    done = RunFactory(status=RunStatus.DONE)
    failed = RunFactory(status=RunStatus.FAILED)
    assert buttons(admin_client.get(page(failed.pk)).content.decode(), failed.pk) == ["retry"]
    content = admin_client.get(page(done.pk)).content.decode()
    assert "leasejobs-action" not in content
    assert f'href="{RUNS}{done.pk}/history/"' in content  # Django's own button stays


@db
@pytest.mark.parametrize("verb", ["cancel", "release-resume", "release-fail"])
def test_a7_a_button_opens_a_confirmation_and_a_get_changes_nothing(admin_client, verb):
    run = held_run()
    response = admin_client.get(act_url(run.pk, verb))
    assert response.status_code == 200
    content = response.content.decode()
    assert '<form method="post">' in content
    assert 'name="csrfmiddlewaretoken"' in content
    assert f'href="{page(run.pk)}" class="button cancel-link"' in content
    assert Run.objects.get(pk=run.pk).status == RunStatus.HELD
    assert entries(run) == []


@db
@pytest.mark.parametrize(
    ("verb", "status", "entry", "message"),
    [
        ("release-resume", "running", "Released: resumed", "resumed: it is running and due now."),
        ("release-fail", "failed", "Released: failed", "failed."),
        ("cancel", "cancelled", "Cancelled", "cancelled."),
    ],
)
def test_a7_a_confirmed_button_acts_reports_and_logs_as_the_list_does(
    admin_client, verb, status, entry, message
):
    run = held_run()
    response = admin_client.post(act_url(run.pk, verb), follow=True)
    assert response.redirect_chain == [(page(run.pk), 302)]
    assert said(response, SUCCESS) == [f"Run {run.pk} {message}"]
    stored = Run.objects.get(pk=run.pk)
    assert stored.status == status
    if verb == "release-resume":
        assert stored.next_attempt_at <= timezone.now()  # due now
    assert entries(run) == [entry]
    assert LogEntry.objects.get(object_id=run.pk).user.get_username() == "admin"


@db
def test_a8_release_fail_asks_for_an_optional_reason_and_keeps_it_with_who(admin_client):
    run = held_run()
    asked = admin_client.get(act_url(run.pk, "release-fail")).content.decode()
    assert 'name="reason"' in asked
    assert 'maxlength="200"' in asked
    resume = admin_client.get(act_url(run.pk, "release-resume")).content.decode()
    assert 'name="reason"' not in resume

    reason = "card 102 was charged; refunded by hand (OPS-812)"
    response = admin_client.post(act_url(run.pk, "release-fail"), {"reason": reason}, follow=True)
    assert said(response, SUCCESS) == [f"Run {run.pk} failed."]
    stored = Run.objects.get(pk=run.pk)
    assert stored.status == RunStatus.FAILED
    assert stored.last_error == f"interrupted; failed by admin: {reason}"
    assert entries(run) == [f"Released: failed ({reason})"]
    assert reason in response.content.decode()  # the summary's last error, on the run's page


@db
def test_a8_a_reason_too_long_is_said_and_nothing_changes(admin_client):
    run = held_run()
    response = admin_client.post(act_url(run.pk, "release-fail"), {"reason": "x" * 201})
    assert response.status_code == 200
    assert "A reason is at most 200 characters." in response.content.decode()
    assert Run.objects.get(pk=run.pk).status == RunStatus.HELD
    assert entries(run) == []


@db
def test_a7_retry_from_the_page_starts_a_new_run_and_links_to_it(admin_client):
    failed = RunFactory(job="tests.walk", instance="x", status=RunStatus.FAILED, payload='{"a": 1}')
    response = admin_client.post(act_url(failed.pk, "retry"), follow=True)
    new = Run.objects.exclude(pk=failed.pk).get(job="tests.walk", instance="x")
    assert new.status == RunStatus.RUNNING
    assert new.decoded_payload().value == {"a": 1}
    link = f'<a href="{page(new.pk)}">{new.pk}</a>'
    assert said(response, SUCCESS) == [f"Run {failed.pk} started again as run {link}."]
    assert link in response.content.decode()  # rendered as a link, not as escaped text
    assert entries(failed) == [f"Retried as run {new.pk}"]


@db
def test_a7_retry_from_the_list_links_to_each_new_run(admin_client):
    failed = RunFactory(job="tests.walk", instance="y", status=RunStatus.FAILED)
    data = {"action": "retry_runs", "_selected_action": [failed.pk]}
    response = admin_client.post(RUNS, data, follow=True)
    new = Run.objects.exclude(pk=failed.pk).get(job="tests.walk", instance="y")
    assert said(response, SUCCESS) == ["1 run started again."]
    link = f'<a href="{page(new.pk)}">{new.pk}</a>'
    assert said(response, INFO) == [f"Run {failed.pk} started again as run {link}."]
    assert link in response.content.decode()
    assert entries(failed) == [f"Retried as run {new.pk}"]


@db
def test_a7_another_operator_first_the_page_says_already_and_logs_nothing(admin_client):
    held = held_run()
    page_shown = admin_client.get(act_url(held.pk, "release-resume"))
    assert page_shown.status_code == 200
    assert operators.release(held.pk, by="someone-else")  # while the confirmation is open
    response = admin_client.post(act_url(held.pk, "release-resume"), follow=True)
    [warning] = said(response, WARNING)
    assert warning.startswith(f"Run {held.pk} was not released: it is not held any more")
    assert entries(held) == []

    done = RunFactory()
    Run.objects.filter(pk=done.pk).update(status=RunStatus.DONE, live_key=None)
    response = admin_client.post(act_url(done.pk, "cancel"), follow=True)
    [warning] = said(response, WARNING)
    assert warning.startswith(f"Run {done.pk} was not cancelled: it had already finished")
    assert entries(done) == []


@db
def test_a7_a_second_retry_joins_the_run_the_first_started(admin_client):
    failed = RunFactory(job="tests.walk", instance="z", status=RunStatus.FAILED)
    admin_client.post(act_url(failed.pk, "retry"))
    new = Run.objects.exclude(pk=failed.pk).get(job="tests.walk", instance="z")
    response = admin_client.post(act_url(failed.pk, "retry"), follow=True)  # a stale page
    link = f'<a href="{page(new.pk)}">{new.pk}</a>'
    assert said(response, INFO) == [
        f"{failed.pk}: joined the live run {link} of the same job and instance."
    ]
    assert Run.objects.filter(job="tests.walk", instance="z").count() == 2
    assert entries(failed) == [f"Retried as run {new.pk}"]  # once


@db
def test_a7_a_button_no_longer_valid_leads_back_to_the_run_with_a_warning(admin_client):
    run = RunFactory()  # running: nothing to release
    response = admin_client.get(act_url(run.pk, "release-fail"), follow=True)
    assert response.redirect_chain == [(page(run.pk), 302)]
    [warning] = said(response, WARNING)
    assert "is not possible for run" in warning
    assert Run.objects.get(pk=run.pk).status == RunStatus.RUNNING


@db
def test_a7_a_button_for_a_run_that_does_not_exist_is_a_warning_not_a_500(admin_client):
    response = admin_client.post(act_url("01JQ0NOSUCHRUN000000000000", "cancel"), follow=True)
    assert response.status_code == 200
    assert said(response, WARNING) == [
        "There is no run 01JQ0NOSUCHRUN000000000000: nothing was done."
    ]


# -- permissions and CSRF ------------------------------------------------------------------------


@pytest.fixture
def staff(client):
    """A staff user who may view runs, and nothing more (yet)."""
    user = User.objects.create_user("clerk", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=["view_run", "view_step"]))
    client.force_login(user)
    return user


def grant(user: User, *codenames: str) -> User:
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return User.objects.get(pk=user.pk)  # permissions are cached on the instance


@db
def test_a7_a_user_without_the_permissions_sees_no_button(client, staff, admin_client):
    for run in (held_run(), RunFactory(status=RunStatus.FAILED)):
        assert buttons(admin_client.get(page(run.pk)).content.decode(), run.pk)  # a superuser's
        content = client.get(page(run.pk)).content.decode()
        assert "leasejobs-action" not in content
        assert buttons(content, run.pk) == []


@db
@pytest.mark.parametrize("verb", ["cancel", "retry", "release-resume", "release-fail"])
def test_a7_a_forged_button_post_without_the_permission_is_forbidden(client, staff, verb):
    run = held_run() if verb != "retry" else RunFactory(status=RunStatus.FAILED)
    before = Run.objects.filter(pk=run.pk).values().get()
    assert client.get(act_url(run.pk, verb)).status_code == 403
    assert client.post(act_url(run.pk, verb)).status_code == 403
    assert Run.objects.filter(pk=run.pk).values().get() == before
    assert Run.objects.count() == 1
    assert entries(run) == []


@db
def test_a7_each_permission_unlocks_its_buttons_only(client, staff):
    run = held_run()
    grant(staff, "cancel_run")
    assert buttons(client.get(page(run.pk)).content.decode(), run.pk) == ["cancel"]
    assert client.post(act_url(run.pk, "release-resume")).status_code == 403
    grant(staff, "release_run")
    offered = buttons(client.get(page(run.pk)).content.decode(), run.pk)
    assert offered == ["cancel", "release-resume", "release-fail"]


@db
def test_a7_the_permission_alone_without_view_run_is_forbidden(client):
    user = User.objects.create_user("robot", password="pw", is_staff=True)
    grant(user, "release_run")
    client.force_login(user)
    run = held_run()
    assert client.get(act_url(run.pk, "release-resume")).status_code == 403
    assert client.post(act_url(run.pk, "release-resume")).status_code == 403
    assert Run.objects.get(pk=run.pk).status == RunStatus.HELD


@db
def test_a7_a_button_post_needs_the_csrf_token(admin_user):
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(admin_user)
    run = held_run()
    assert strict.post(act_url(run.pk, "release-resume")).status_code == 403
    assert Run.objects.get(pk=run.pk).status == RunStatus.HELD
    form = strict.get(act_url(run.pk, "release-resume"))
    token = form.context["csrf_token"]
    assert strict.post(act_url(run.pk, "release-resume"), {"csrfmiddlewaretoken": token})
    assert Run.objects.get(pk=run.pk).status == RunStatus.RUNNING


# -- a row the database cannot read back (§3, §11, §12) -------------------------------------------

#: Per backend, a start time the backend cannot read back (as in test_admin_hardening).
UNREADABLE_START = {
    "sqlite": "UPDATE leasejobs_run SET started_at = '2026-02-30 10:00:00' WHERE id = %s",
    "postgresql": "UPDATE leasejobs_run SET started_at = started_at + interval '8000 years' "
    "WHERE id = %s",
    "mysql": "UPDATE leasejobs_run SET started_at = '9999-12-31 23:59:59' WHERE id = %s",
}


@pytest.fixture
def unreadable(mysql_refuses_year_9999):
    """Make run rows unreadable: ``unreadable(run)``."""

    def corrupt(run: Run) -> Run:
        with connection.cursor() as cursor:
            cursor.execute(UNREADABLE_START[connection.vendor], [run.pk])
        with pytest.raises(Exception):  # noqa: B017, PT011 - each backend raises its own
            Run.objects.get(pk=run.pk)
        return run

    return corrupt


@db
def test_a7_an_unreadable_live_row_is_cancelled_from_its_page(admin_client, unreadable):
    run = unreadable(RunFactory(job="tests.walk", instance="restored"))
    response = admin_client.get(page(run.pk))
    assert response.status_code == 200
    content = response.content.decode()
    assert "cannot give this run back as a whole" in content
    assert buttons(content, run.pk) == ["cancel"]  # no retry: it has no job or payload to give
    confirm = admin_client.get(act_url(run.pk, "cancel"))
    assert confirm.status_code == 200
    assert "cannot be read back whole" in confirm.content.decode()
    response = admin_client.post(act_url(run.pk, "cancel"), follow=True)
    assert response.status_code == 200
    assert said(response, SUCCESS) == [f"Run {run.pk} cancelled."]
    assert Run.objects.filter(pk=run.pk).values_list("status", flat=True).get() == "cancelled"
    assert entries(run) == ["Cancelled"]


@db
def test_a7_an_unreadable_finished_row_offers_no_button(admin_client, unreadable):
    run = unreadable(RunFactory(status=RunStatus.DONE))
    response = admin_client.get(page(run.pk))
    assert response.status_code == 200
    assert "cannot give this run back as a whole" in response.content.decode()
    assert buttons(response.content.decode(), run.pk) == []
    response = admin_client.get(act_url(run.pk, "cancel"), follow=True)  # a bookmark
    assert response.redirect_chain == [(page(run.pk), 302)]
    [warning] = said(response, WARNING)
    assert warning == f"Cancel is not possible for run {run.pk} as it is now (unreadable)."


# -- long values folded (A7, A2) -------------------------------------------------------------------

ITEMS = [{"id": n, "email": f"contact-{n}@example.com"} for n in range(100)]


def test_a7_what_is_long_and_how_it_is_described():
    assert not is_long("x" * FOLD_CHARS)
    assert is_long("x" * (FOLD_CHARS + 1))
    assert not is_long("\n" * 19)
    assert is_long("\n" * 20)
    assert described(ITEMS) == "list of 100 items"
    assert described({"a": 1}) == "object with 1 key"
    assert described("abc") == "text of 3 characters"
    assert (size("x" * 812), size("x" * 4096), size("x" * 3 * 1024 * 1024)) == (
        "812 bytes",
        "4 KB",
        "3.0 MB",
    )


@db
def test_a7_a_long_step_result_is_folded_and_a_short_one_is_not(admin_client):
    run = RunFactory()
    StepFactory(run=run, name="fetch", result=json.dumps(ITEMS))
    StepFactory(run=run, name="save", result='{"saved": 100}')
    content = admin_client.get(page(run.pk)).content.decode()
    assert content.count('<details class="leasejobs-fold">') == 1
    assert "<summary>list of 100 items, 6 KB " in content
    assert "&quot;email&quot;: &quot;contact-99@example.com&quot;" in content  # all there
    save = content.index("&quot;saved&quot;: 100")
    assert content.rfind("<details", 0, save) < content.rfind("</details>", 0, save)  # not folded


@db
def test_a7_a_long_payload_is_folded_and_still_escaped(admin_client):
    run = RunFactory(payload=json.dumps({"html": "<script>alert(1)</script>", "items": ITEMS}))
    content = admin_client.get(page(run.pk)).content.decode()
    assert "<summary>object with 2 keys, " in content
    assert "<script>alert(1)</script>" not in content
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in content


@db
def test_a7_a_long_value_that_cannot_be_decoded_keeps_its_reason_in_view(admin_client):
    raw = "{" + "x" * 3000
    run = RunFactory(payload=raw)
    content = admin_client.get(page(run.pk)).content.decode()
    error = content.index('class="leasejobs-decode-error"')
    reason = content.index("Cannot be decoded:", error)
    fold = content.index('<details class="leasejobs-fold"><summary>stored text, 3 KB', error)
    assert reason < fold  # the reason first, in view; the text folded below it
    assert raw in content


# -- schedule times name their zone (A5) -------------------------------------------------------


@pytest.fixture
def paris():
    return ScheduleFactory(
        job="tests.paris",
        expression="0 3 * * *",
        timezone="Europe/Paris",
        next_due_at=datetime(2026, 12, 2, 2, 0, tzinfo=UTC),
        last_run_at=datetime(2026, 12, 1, 2, 0, 5, tzinfo=UTC),
        last_success_at=datetime(2026, 12, 1, 2, 3, tzinfo=UTC),
        last_outcome="done",
        last_run=RunFactory(job="tests.paris", status=RunStatus.DONE),
        paused_at=datetime(2026, 12, 1, 9, 30, tzinfo=UTC),
        paused_by="ops",
    )


@db
def test_a5_a8_schedule_times_are_in_the_sites_zone_named_the_schedules_beside(admin_client, paris):
    listed = admin_client.get(SCHEDULES).content.decode()
    assert "2026-12-02 02:00:00 UTC (03:00 Europe/Paris)" in listed
    assert "2026-12-01 02:00:05 UTC · done" in listed
    assert "ops at 2026-12-01 09:30:00 UTC" in listed
    detail = admin_client.get(f"{SCHEDULES}{paris.pk}/change/").content.decode()
    for text in (
        "2026-12-02 02:00:00 UTC (03:00 Europe/Paris)",
        "2026-12-01 02:00:05 UTC · done",
        "2026-12-01 02:03:00 UTC",  # the last success
        "ops at 2026-12-01 09:30:00 UTC",
    ):
        assert text in detail, text


@db
@override_settings(TIME_ZONE="America/New_York")
def test_a5_a8_recorded_times_are_in_the_sites_time_zone_and_say_so(admin_client, paris):
    listed = admin_client.get(SCHEDULES).content.decode()
    assert "2026-12-01 21:00:00 America/New_York (2026-12-02 03:00 Europe/Paris)" in listed
    assert "2026-11-30 21:00:05 America/New_York · done" in listed


def test_a5_a_due_time_in_the_sites_own_zone_or_an_unknown_one_is_named_once():
    when = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)
    assert zoned(when, "UTC") == "2026-12-02 02:00:00 UTC"
    assert zoned(when, "Mars/Olympus") == "2026-12-02 02:00:00 UTC"  # the schedule reads invalid
