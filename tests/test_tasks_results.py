"""A task run read back as a ``TaskResult`` (SPEC §9; ``tasks/results.py``).

What ``get_result()`` derives from the run and its attempts: ``RUNNING``
while the pass holds its lease, a cancel's ``RunCancelled``, an operator's
retry as a new result -- and, case by case, the same status, value and error
class as Django's own ``ImmediateBackend``. What a read costs is in
``test_tasks_reads.py``.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from django_leasejobs import cancel, compat
from django_leasejobs.models import Run
from django_leasejobs.tasks import TASK_JOB
from tests import tasks
from tests.task_helpers import Status, drive, ours

pytestmark = pytest.mark.django_db


def test_tasks_a_task_reading_its_own_result_mid_pass_sees_running():
    """SPEC §9: a live run whose pass has begun and holds its lease reads as RUNNING."""
    enqueued = tasks.own_status.enqueue()
    drive()
    result = tasks.own_status.get_result(enqueued.id)
    assert result.status == Status.SUCCESSFUL
    assert result.return_value == {"context": "RUNNING", "read": "RUNNING"}


def test_tasks_cancelled_run_is_failed_with_a_run_cancelled_error():
    """SPEC §9: ``cancelled`` → FAILED, its error a ``django_leasejobs.exceptions`` class."""
    enqueued = tasks.add.enqueue(1, 1)
    assert cancel(enqueued.id, by="tester")
    result = tasks.add.get_result(enqueued.id)
    assert result.status == Status.FAILED
    assert result.finished_at is not None
    assert [e.exception_class_path for e in result.errors] == [
        "django_leasejobs.exceptions.RunCancelled"
    ]
    assert drive().attempted == 0


def test_tasks_retry_enqueues_the_call_again_as_a_new_run_and_the_old_result_stays_failed(
    admin_client,
):
    """SPEC §3 ``retry``, A3: the admin's retry of a failed task run is a NEW task run."""
    failed = tasks.explode.enqueue("once")
    drive()
    assert tasks.explode.get_result(failed.id).status == Status.FAILED
    response = admin_client.post(
        "/admin/leasejobs/run/",
        {"action": "retry_runs", "_selected_action": [failed.id]},
    )
    assert response.status_code == 302
    again = Run.objects.exclude(pk=failed.id).get(job=TASK_JOB)
    assert (again.origin, again.instance, again.live_key) == ("retry", "tests.tasks.explode", None)
    assert tasks.explode.get_result(again.pk).status == Status.READY
    drive()
    retried = tasks.explode.get_result(again.pk)
    assert retried.args == ["once"]  # the same call
    assert (retried.status, retried.attempts, len(retried.errors)) == (Status.FAILED, 1, 1)
    old = tasks.explode.get_result(failed.id)
    assert (old.status, old.attempts, len(old.errors)) == (Status.FAILED, 1, 1)


# -- the same outcomes as Django's ImmediateBackend ------------------------------------------------


#: Django's own reference backend: it runs a task inside ``enqueue()``.
IMMEDIATE_PATH = f"{compat.FRAMEWORK}.backends.immediate.ImmediateBackend"


#: case -> (task, args, status, return value, the first error's exception class path)
CASES = {
    "returns_a_dict": ("send_email", ("ann@ex.com",), "SUCCESSFUL", {"sent": "ann@ex.com"}, None),
    "raises": ("explode", (), "FAILED", None, "builtins.ValueError"),
    "returns_a_set": ("returns_a_set", (), "FAILED", None, "builtins.TypeError"),
    "async": ("slow_add", (20, 22), "SUCCESSFUL", 42, None),
    "takes_context": ("attempt_number", (), "SUCCESSFUL", 1, None),
    "system_exit": ("exits", (), "FAILED", None, "builtins.SystemExit"),
    "returns_a_tuple": ("returns_a_tuple", (), "SUCCESSFUL", [1, [2, 3]], None),
    "returns_bytes": ("returns_bytes", (), "SUCCESSFUL", "café", None),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("backend", ["ours", "immediate"])
def test_tasks_outcome_is_what_djangos_immediate_backend_reports(backend, case):
    """SPEC §9: "code written against ``@task`` runs unchanged": status, value, error class.

    The expectations are written once; the ``immediate`` cases prove they are
    what Django's own backend reports, the ``ours`` cases that we report the same.
    """
    name, args, status, value, error_path = CASES[case]
    immediate = {"BACKEND": IMMEDIATE_PATH, "QUEUES": ["default", "emails"]}
    with override_settings(TASKS={"default": ours(), "immediate": immediate}):
        if backend == "immediate":
            bound = getattr(tasks, name).using(backend="immediate")
            result = bound.enqueue(*args)
            assert type(compat.task_backends["immediate"]).__name__ == "ImmediateBackend"
        else:
            bound = getattr(tasks, name)
            enqueued = bound.enqueue(*args)
            assert enqueued.status == Status.READY
            assert drive().attempted == 1
            result = bound.get_result(enqueued.id)
        assert result.task == bound
    assert result.status == status
    assert result.is_finished
    assert result.attempts == len(result.worker_ids) == 1
    assert result.args == list(args)
    assert result.kwargs == {}
    if status == "SUCCESSFUL":
        assert result.return_value == value
        assert result.errors == []
    else:
        with pytest.raises(ValueError, match="failed"):
            result.return_value  # noqa: B018
        assert [e.exception_class_path for e in result.errors] == [error_path]
        assert result.errors[0].traceback.startswith("Traceback (most recent call last)")


def test_l1_a8_a_task_runs_in_flight_only_while_its_lease_lasts_by_the_database_clock(
    frozen_clock, monkeypatch
):
    """SPEC §9, L1: RUNNING is the run's lease held by the database's clock, read in the same
    statement as the row. The web server's clock, ten minutes behind, would still call an
    expired lease held."""
    db_now = frozen_clock.now()
    monkeypatch.setattr(timezone, "now", lambda: db_now - timedelta(minutes=10))
    enqueued = tasks.add.enqueue(1, 1)
    lease = {"lease_owner": "o", "lease_holder": "w:1:2", "lease_began_at": db_now}
    Run.objects.filter(pk=enqueued.id).update(
        next_attempt_at=db_now + timedelta(minutes=1), **lease
    )
    assert tasks.add.get_result(enqueued.id).status == Status.RUNNING
    Run.objects.filter(pk=enqueued.id).update(next_attempt_at=db_now - timedelta(minutes=1))
    assert tasks.add.get_result(enqueued.id).status == Status.READY
