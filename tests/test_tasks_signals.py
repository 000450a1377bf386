"""``task_enqueued``, ``task_started``, ``task_finished``: each once, when it should be (SPEC §9).

``enqueue()`` sends the first (``tasks/backend.py``), the pass the second
(``tasks/execution.py``), the final outcome the third (``tasks/finished.py``),
from inside an ``except`` block for a failure.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import pytest
from django.db import transaction

from django_leasejobs import compat
from django_leasejobs.models import Run
from django_leasejobs.tasks import LeaseJobsBackend
from tests import tasks
from tests.task_helpers import AT_ONCE, Status, drive, tasks_with

pytestmark = pytest.mark.django_db


@dataclass(frozen=True)
class Heard:
    signal: str
    sender: type
    id: str
    status: str
    exception: BaseException | None


SIGNALS = {
    "enqueued": compat.task_enqueued,
    "started": compat.task_started,
    "finished": compat.task_finished,
}


@pytest.fixture
def heard():
    """Every task signal sent during the test, in order, with ``sys.exc_info()`` as received."""
    seen: list[Heard] = []

    def listener(name):
        def receive(sender, task_result, **kwargs):
            seen.append(Heard(name, sender, task_result.id, task_result.status, sys.exc_info()[1]))

        return receive

    for name, signal in SIGNALS.items():
        signal.connect(listener(name), weak=False, dispatch_uid=f"t-heard-{name}")
    yield seen
    for name, signal in SIGNALS.items():
        signal.disconnect(dispatch_uid=f"t-heard-{name}")


def _names(heard, result_id):
    return [h.signal for h in heard if h.id == result_id]


def test_tasks_signals_each_sent_once_for_a_successful_task(heard):
    """SPEC §9: ``task_enqueued`` at enqueue, ``task_started`` and ``task_finished`` once each."""
    enqueued = tasks.add.enqueue(1, 2)
    assert [(h.signal, h.status) for h in heard] == [("enqueued", Status.READY)]
    drive()
    assert [(h.signal, h.status) for h in heard] == [
        ("enqueued", Status.READY),
        ("started", Status.RUNNING),
        ("finished", Status.SUCCESSFUL),
    ]
    assert {h.id for h in heard} == {enqueued.id}
    assert {h.sender for h in heard} == {LeaseJobsBackend}  # the backend's class, as Django's


def test_tasks_task_enqueued_is_sent_at_once_with_the_run_written():
    """SPEC §9: ``task_enqueued`` at once, inside the caller's transaction, after the INSERT."""
    seen = []

    def receive(sender, task_result, **kwargs):
        seen.append((task_result.id, Run.objects.filter(pk=task_result.id).exists()))

    compat.task_enqueued.connect(receive, weak=False, dispatch_uid="t-enqueued-at-once")
    try:
        with transaction.atomic():
            enqueued = tasks.add.enqueue(1, 2)
            assert seen == [(enqueued.id, True)]  # before the block ends
    finally:
        compat.task_enqueued.disconnect(dispatch_uid="t-enqueued-at-once")
    assert seen == [(enqueued.id, True)]  # once


def test_tasks_signals_each_sent_once_for_a_failed_task_and_finished_sees_the_exception(heard):
    """SPEC §9: ``task_finished`` for a failure is sent inside the ``except`` block."""
    enqueued = tasks.explode.enqueue("seen by the receiver")
    drive()
    assert _names(heard, enqueued.id) == ["enqueued", "started", "finished"]
    finished = heard[-1]
    assert finished.status == Status.FAILED
    assert isinstance(finished.exception, ValueError)
    assert str(finished.exception) == "seen by the receiver"
    assert heard[0].exception is heard[1].exception is None


def test_tasks_a_retried_failure_sends_task_finished_once_after_its_last_attempt(heard):
    """SPEC §9: "``task_finished`` is sent once, at the final outcome", not per failed attempt."""
    with tasks_with({"RETRY": {"max_attempts": 2, **AT_ONCE}}):
        enqueued = tasks.explode.enqueue()
        assert drive().retrying == 1
        assert _names(heard, enqueued.id) == ["enqueued", "started"]
        assert drive().failed == 1
    assert _names(heard, enqueued.id) == ["enqueued", "started", "started", "finished"]
    finished = heard[-1]
    assert finished.status == Status.FAILED
    assert isinstance(finished.exception, ValueError)


def test_tasks_a_retried_success_sends_task_finished_once(heard):
    """SPEC §9: a failed attempt that will be retried sends no ``task_finished``."""
    with tasks_with({"RETRY": {"max_attempts": 2, **AT_ONCE}}):
        enqueued = tasks.flaky.enqueue()
        drive()
        drive()
    assert _names(heard, enqueued.id) == ["enqueued", "started", "started", "finished"]
    assert heard[-1].status == Status.SUCCESSFUL
    assert heard[-1].exception is None


def test_tasks_each_failure_in_one_drive_sends_task_finished_with_its_own_exception(heard):
    """SPEC §9: every failed task's ``task_finished`` receiver sees that task's exception."""
    first, second = tasks.explode.enqueue("first"), tasks.explode.enqueue("second")
    assert drive().failed == 2
    finished = {h.id: h for h in heard if h.signal == "finished"}
    assert set(finished) == {first.id, second.id}
    assert [str(finished[r.id].exception) for r in (first, second)] == ["first", "second"]


def test_tasks_a_signal_receiver_that_raises_breaks_neither_enqueue_nor_the_worker(caplog):
    """SPEC §9: receivers are the site's code; one that raises is logged, the task goes on."""

    def broken(sender, **kwargs):
        raise RuntimeError("receiver bug")

    for name, signal in SIGNALS.items():
        signal.connect(broken, weak=False, dispatch_uid=f"t-broken-{name}")
    try:
        enqueued = tasks.add.enqueue(2, 2)
        assert enqueued.status == Status.READY
        report = drive()
        failing = tasks.explode.enqueue()
        failed_report = drive()
    finally:
        for name, signal in SIGNALS.items():
            signal.disconnect(dispatch_uid=f"t-broken-{name}")
    assert report.completed == failed_report.failed == 1
    assert tasks.add.get_result(enqueued.id).return_value == 4
    assert tasks.explode.get_result(failing.id).errors[0].exception_class_path == (
        "builtins.ValueError"
    )
    logged = [r.getMessage() for r in caplog.records if r.name == "django_leasejobs"]
    assert any("RuntimeError" in message for message in logged)
