"""A7: deleting runs in the admin never frees a key while a pass of it may be in flight.

A run that holds its coalescing key -- running, held, or cancelled with its
pass still in flight -- is refused, with a message pointing to cancel, by the
change page's Delete and by the list's "Delete selected runs"; finished runs
delete freely, with their steps and task attempts. The real worker process
case is ``tests/test_admin_delete_processes.py``.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.auth.models import Permission, User
from django.contrib.messages import SUCCESS, WARNING
from django.db import connection, models
from django.utils import timezone

from django_leasejobs import RunStatus, operators, start
from django_leasejobs.models import Missed, Run, Schedule, Step, TaskAttempt
from django_leasejobs.store import deletes
from django_leasejobs.store.deletes import delete_finished
from tests.factories import MissedFactory, RunFactory, ScheduleFactory, StepFactory
from tests.utils import relations_to

pytestmark = pytest.mark.django_db

RUNS = "/admin/leasejobs/run/"
LIVE = "is live, so it was not deleted"
CANCEL_FIRST = "Cancel it first, with the Cancel button on this page"
STOPPING = "was cancelled, but its pass may still be running, so it was not deleted"


def change_page(run) -> str:
    return f"{RUNS}{run.pk}/change/"


def delete_page(run) -> str:
    return f"{RUNS}{run.pk}/delete/"


def messages_of(response, level=None):
    return [str(m) for m in response.context["messages"] if level is None or m.level == level]


def stored(run) -> bool:
    return Run.objects.filter(pk=run.pk).exists()


def cancelled_in_flight():
    """A run cancelled while a pass of it is in flight: cancelled, still holding its key (§3)."""
    now = timezone.now()
    run = RunFactory(
        lease_owner="01JQ0LEASEOWNER00000000000",
        lease_began_at=now,
        next_attempt_at=now + timedelta(minutes=5),
    )
    assert operators.cancel(run.pk, by="someone")
    run.refresh_from_db()
    assert (run.status, run.live_key) == (RunStatus.CANCELLED, f"{run.job}|{run.instance}")
    return run


def with_dependants(run):
    """*run* with a step, a task attempt, a missed due time and a schedule pointing at it."""
    StepFactory(run=run, name="fetch:1")
    TaskAttempt.objects.create(
        run=run, owner="01JQ0ATTEMPTOWNER000000000", worker_id="w", began_at=run.started_at
    )
    MissedFactory(run=run)
    ScheduleFactory(last_run=run)
    return run


@pytest.fixture(params=["running", "held", "cancelled in flight"])
def keyed(request):
    """A run holding its key, each way one can: the three A7 refuses to delete."""
    if request.param == "cancelled in flight":
        return cancelled_in_flight()
    return RunFactory(status=request.param)


# -- the change page -----------------------------------------------------------------------


def test_a7_the_change_page_offers_no_delete_for_a_run_holding_its_key(admin_client, keyed):
    content = admin_client.get(change_page(keyed)).content.decode()
    assert delete_page(keyed) not in content
    finished = RunFactory(status=RunStatus.DONE)
    assert delete_page(finished) in admin_client.get(change_page(finished)).content.decode()


@pytest.mark.parametrize("method", ["get", "post"])
def test_a7_the_delete_view_refuses_a_live_run_and_points_to_cancel(admin_client, method):
    run = with_dependants(RunFactory(status=RunStatus.RUNNING))
    response = getattr(admin_client, method)(delete_page(run), {"post": "yes"}, follow=True)
    assert response.redirect_chain == [(change_page(run), 302)]
    [message] = messages_of(response, WARNING)
    assert f"Run {run.pk} {LIVE}" in message
    assert CANCEL_FIRST in message
    # ... and the page it is said on has that button (A8: not the list's action).
    assert f'href="{RUNS}{run.pk}/cancel/"' in response.content.decode()
    assert stored(run)
    assert Step.objects.filter(run=run).exists()
    assert TaskAttempt.objects.filter(run=run).exists()
    assert not LogEntry.objects.filter(action_flag=DELETION).exists()


def test_a7_the_delete_view_refuses_a_held_run(admin_client):
    run = RunFactory(status=RunStatus.HELD, failure_code="interrupted")
    response = admin_client.post(delete_page(run), {"post": "yes"}, follow=True)
    assert CANCEL_FIRST in messages_of(response, WARNING)[0]
    assert stored(run)


def test_a7_the_delete_view_refuses_a_cancelled_run_whose_pass_is_in_flight(admin_client):
    run = cancelled_in_flight()
    response = admin_client.post(delete_page(run), {"post": "yes"}, follow=True)
    [message] = messages_of(response, WARNING)
    assert f"Run {run.pk} {STOPPING}" in message
    assert "once the pass has stopped or its lease has expired" in message
    assert Run.objects.get(pk=run.pk).live_key is not None
    # ... and a start of the same (job, instance) still joins it: no second run beside the pass.
    assert start(run.job, instance=run.instance).joined


def test_a7_a_finished_run_deletes_freely_with_its_steps_and_attempts(admin_client):
    run = with_dependants(RunFactory(status=RunStatus.FAILED, failure_code="handler_failed"))
    confirm = admin_client.get(delete_page(run))
    assert confirm.status_code == 200
    assert "Are you sure" in confirm.content.decode()
    response = admin_client.post(delete_page(run), {"post": "yes"}, follow=True)
    assert any("was deleted successfully" in m for m in messages_of(response, SUCCESS))
    assert not stored(run)
    assert not Step.objects.filter(run_id=run.pk).exists()
    assert not TaskAttempt.objects.filter(run_id=run.pk).exists()
    # What points at a deleted run keeps existing, pointing at none (as retention leaves it).
    assert Missed.objects.get().run_id is None
    assert Schedule.objects.get().last_run_id is None
    entry = LogEntry.objects.get(object_id=run.pk)
    assert entry.action_flag == DELETION


def test_a7_a_run_that_holds_its_key_by_the_post_is_not_deleted(admin_client):
    """Loaded finished, live by the time the operator confirms: the POST decides, not the page."""
    run = RunFactory(status=RunStatus.DONE)
    assert admin_client.get(delete_page(run)).status_code == 200
    Run.objects.filter(pk=run.pk).update(
        status=RunStatus.RUNNING, live_key=f"{run.job}|{run.instance}", ended_at=None
    )
    response = admin_client.post(delete_page(run), {"post": "yes"}, follow=True)
    assert LIVE in messages_of(response, WARNING)[0]
    assert stored(run)


def test_a7_the_delete_itself_is_a_compare_and_set_on_the_key():
    """A run that takes a key between the read and the DELETE is kept, its steps too.

    The key is written on this connection just before the steps go, in each
    round (a rollback undoes it with the rest), so every round's DELETE finds it.
    """
    run = RunFactory(status=RunStatus.DONE)
    StepFactory(run=run)
    step_delete = f"DELETE FROM {connection.ops.quote_name(Step._meta.db_table)}".upper()
    rounds = []

    def key_taken_meanwhile(execute, sql, params, many, context):
        if sql.upper().startswith(step_delete):
            rounds.append(sql)
            Run.objects.filter(pk=run.pk).update(live_key=f"{run.job}|{run.instance}")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(key_taken_meanwhile):
        assert delete_finished([run.pk]) == []
    assert len(rounds) == deletes.ROUNDS  # each round refused, rolled back, tried again
    assert stored(run)
    assert Step.objects.filter(run=run).count() == 1  # rolled back with the refused delete


def test_a7_delete_finished_deletes_only_runs_without_a_key():
    finished = [RunFactory(status=s) for s in (RunStatus.DONE, RunStatus.FAILED)]
    kept = [RunFactory(), RunFactory(status=RunStatus.HELD), cancelled_in_flight()]
    ids = [run.pk for run in [*kept, *finished]]
    assert delete_finished(ids) == [run.pk for run in finished]
    assert [stored(run) for run in kept] == [True, True, True]


def test_a7_delete_finished_handles_every_relation_to_run():
    """The delete bypasses Django's collector: a new foreign key to Run must be handled in
    store/deletes.py (or the delete fails on the constraint), as in retention."""
    assert relations_to(Run) == {
        (Step, "run", models.CASCADE),
        (TaskAttempt, "run", models.CASCADE),
        (Schedule, "last_run", models.SET_NULL),
        (Missed, "run", models.SET_NULL),
    }


# -- the list's "Delete selected runs" -------------------------------------------------------


def delete_selected(client, *runs, confirmed=False):
    data = {"action": "delete_selected", "_selected_action": [run.pk for run in runs]}
    if confirmed:
        data["post"] = "yes"
    return client.post(RUNS, data, follow=True)


def test_a7_delete_selected_is_offered_as_django_names_it(admin_client):
    RunFactory()
    content = admin_client.get(RUNS).content.decode()
    assert '<option value="delete_selected">Delete selected runs</option>' in content


def test_a7_delete_selected_confirms_only_the_finished_runs(admin_client):
    finished = [RunFactory(status=RunStatus.DONE), RunFactory(status=RunStatus.CANCELLED)]
    live = [RunFactory(), RunFactory(status=RunStatus.HELD)]
    stopping = cancelled_in_flight()
    response = delete_selected(admin_client, *live, stopping, *finished)
    assert response.status_code == 200
    assert response.templates[0].name == "admin/delete_selected_confirmation.html"
    # The confirmation lists, and sends back, the finished runs only: it promises nothing more.
    assert {run.pk for run in response.context["queryset"]} == {run.pk for run in finished}
    content = response.content.decode()
    for run in [*live, stopping]:
        assert f'value="{run.pk}"' not in content
    assert messages_of(response, WARNING) == [
        "2 runs are live and were not deleted: a pass of each may be running. Cancel them "
        "first (Cancel selected runs); once they have finished they can be deleted.",
        "1 cancelled run was not deleted: its pass may still be running. Delete it once that "
        "pass has stopped or its lease has expired.",
    ]
    assert all(stored(run) for run in [*live, stopping, *finished])


def test_a7_delete_selected_deletes_the_finished_and_refuses_the_live(admin_client):
    finished = [with_dependants(RunFactory(status=RunStatus.DONE)), RunFactory(status="failed")]
    live = RunFactory()
    # The confirmation's POST, even one that names a live run, deletes only the finished.
    response = delete_selected(admin_client, live, *finished, confirmed=True)
    assert messages_of(response, SUCCESS) == ["Successfully deleted 2 runs."]
    assert messages_of(response, WARNING) == [
        "1 run is live and was not deleted: a pass of it may be running. Cancel it first "
        "(Cancel selected runs); once it has finished it can be deleted."
    ]
    assert stored(live)
    assert not any(stored(run) for run in finished)
    assert not Step.objects.exclude(run=live).exists()
    assert not TaskAttempt.objects.exists()
    logged = LogEntry.objects.filter(action_flag=DELETION)
    assert sorted(logged.values_list("object_id", flat=True)) == sorted(r.pk for r in finished)


def test_a7_delete_selected_of_live_runs_only_asks_nothing_and_deletes_nothing(admin_client):
    live = [RunFactory(), cancelled_in_flight()]
    response = delete_selected(admin_client, *live)
    assert response.templates[0].name == "admin/change_list.html"
    assert len(messages_of(response, WARNING)) == 2
    assert all(stored(run) for run in live)


def test_a7_a_run_holding_its_key_by_the_confirmation_is_kept(admin_client):
    run = RunFactory(status=RunStatus.DONE)
    assert delete_selected(admin_client, run).status_code == 200  # confirmation shown
    Run.objects.filter(pk=run.pk).update(
        status=RunStatus.RUNNING, live_key=f"{run.job}|{run.instance}", ended_at=None
    )
    response = delete_selected(admin_client, run, confirmed=True)
    assert messages_of(response, SUCCESS) == []
    assert "1 run is live and was not deleted" in messages_of(response, WARNING)[0]
    assert stored(run)


# -- permissions -----------------------------------------------------------------------------


@pytest.fixture
def viewer(client):
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_run"))
    client.force_login(user)
    return user


def test_a7_without_the_delete_permission_delete_is_forbidden(client, viewer):
    run = RunFactory(status=RunStatus.DONE)
    assert "delete_selected" not in client.get(RUNS).content.decode()
    assert client.post(delete_page(run), {"post": "yes"}).status_code == 403
    live = RunFactory()
    assert client.post(delete_page(live), {"post": "yes"}).status_code == 403
    forged = client.post(
        RUNS, {"action": "delete_selected", "_selected_action": [run.pk], "post": "yes"}
    )
    assert forged.status_code == 403
    assert stored(run)
    assert stored(live)


def test_a7_the_delete_permission_lets_a_staff_user_delete_finished_runs(client, viewer):
    viewer.user_permissions.add(Permission.objects.get(codename="delete_run"))
    finished, live = RunFactory(status=RunStatus.DONE), RunFactory()
    response = delete_selected(client, finished, live, confirmed=True)
    assert messages_of(response, SUCCESS) == ["Successfully deleted 1 run."]
    assert not stored(finished)
    assert stored(live)
