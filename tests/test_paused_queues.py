"""W6 (revision 3): a paused queue's runs are not begun; the rest of the work goes on."""

from __future__ import annotations

import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_leasejobs import RunStatus, pause_queue, resume_queue, start
from django_leasejobs.exceptions import InvalidNote
from django_leasejobs.models import PausedQueue, Run
from django_leasejobs.resting import due_in
from tests.models import PassLog
from tests.processes import django_command
from tests.utils import fresh, statements, stop_worker, until

pytestmark = pytest.mark.django_db


def test_w6_a_paused_queues_runs_are_stepped_over_uncharged_and_others_drive_on(define, drive):
    spec = define("t.w6.mixed", lambda p: p.done())
    held = [start(spec, instance=f"m{n}", queue="mail").run for n in range(3)]
    other = start(spec, instance="r", queue="reports").run
    assert pause_queue("mail", by="ops", note="SMTP down")

    report = drive(spec, limit=1)  # the paused runs come first, and do not eat the limit

    assert (report.attempted, report.completed) == (1, 1)
    assert fresh(other).status == RunStatus.DONE
    for run in held:
        stored = fresh(run)
        assert stored.status == RunStatus.RUNNING
        assert (stored.attempts, stored.lease_owner, stored.admission_misses) == (0, None, None)
        assert stored.failure_code == ""
    assert not report.errors
    assert not report.warnings


def test_w6_start_accepts_runs_on_a_paused_queue_and_resume_brings_them_back(define, drive):
    spec = define("t.w6.resume", lambda p: p.done())
    assert pause_queue("mail", by="ops")
    run = start(spec, instance="later", queue="mail").run  # accepted while paused
    assert drive(spec).attempted == 0
    assert fresh(run).status == RunStatus.RUNNING
    assert resume_queue("mail", by="ops")
    assert drive(spec).completed == 1
    assert fresh(run).status == RunStatus.DONE


def test_w6_pause_and_resume_are_compare_and_sets_with_who_when_and_the_note(frozen_clock):
    assert pause_queue("mail", by="alice", note="SMTP down")
    assert not pause_queue("mail", by="bob", note="again")  # already paused: nothing changes
    row = PausedQueue.objects.get(queue="mail")
    assert (row.paused_by, row.note, row.paused_at) == ("alice", "SMTP down", frozen_clock.now())
    assert resume_queue("mail", by="alice")
    assert not resume_queue("mail", by="bob")  # already resumed
    assert not PausedQueue.objects.exists()


@pytest.mark.parametrize("queue", ["", "q" * 101, None, 7, "a\x00b"])
def test_w6_s11_a_bad_queue_name_is_refused_naming_the_argument_and_nothing_is_written(queue):
    with pytest.raises(ValueError, match="queue"):
        pause_queue(queue, by="ops")
    with pytest.raises(ValueError, match="queue"):
        resume_queue(queue, by="ops")
    assert not PausedQueue.objects.exists()


def test_w6_a_note_longer_than_200_characters_is_refused():
    with pytest.raises(InvalidNote):
        pause_queue("mail", by="ops", note="x" * 201)
    assert not PausedQueue.objects.exists()


def test_w6_the_drive_reads_the_pause_in_its_due_read_not_a_statement_of_its_own(define, drive):
    spec = define("t.w6.budget", lambda p: p.done())
    drive(spec)  # the first drive of the process does its housekeeping
    with CaptureQueriesContext(connection) as idle:
        drive(spec)
    pause_queue("mail", by="ops")
    with CaptureQueriesContext(connection) as paused:
        drive(spec)
    assert len(statements(paused)) == len(statements(idle))
    table = PausedQueue._meta.db_table
    assert [sql for sql in statements(paused) if table in sql and "ORDER BY" in sql]


def test_w6_w1_a_paused_queues_due_runs_do_not_make_an_idle_worker_spin(define):
    spec = define("t.w6.rest", lambda p: p.done())
    start(spec, instance="waiting", queue="mail")
    pause_queue("mail", by="ops")
    assert due_in(jobs=[spec.name]) is None  # nothing this worker may drive is waiting


@pytest.mark.django_db(transaction=True)
def test_w6_a_pass_in_flight_finishes_and_a_worker_sees_pause_and_resume():
    """With a real worker process: the pass in flight when the queue is paused finishes;
    the runs behind it wait until the queue is resumed, then are driven."""
    first = start("tests.concurrent", {"sleep": 1.5}, instance="in-flight").run
    worker = django_command(
        "rundueJobs", "--loop", "--interval", "0.2", "--job", "tests.concurrent"
    )
    try:
        assert until(lambda: PassLog.objects.filter(run_id=first.pk).exists(), 60)
        assert pause_queue("default", by="ops")
        behind = [start("tests.concurrent", {"sleep": 0}, instance=f"b{n}").run for n in range(3)]
        assert until(lambda: fresh(first).status == RunStatus.DONE, 30)  # it finished
        time.sleep(1.5)  # several drives of a worker polling every 0.2 s
        assert not PassLog.objects.filter(run_id__in=[run.pk for run in behind]).exists()
        assert resume_queue("default", by="ops")
        assert until(
            lambda: Run.objects.filter(pk__in=[r.pk for r in behind], status="done").count() == 3,
            30,
        )
    finally:
        stop_worker(worker)
