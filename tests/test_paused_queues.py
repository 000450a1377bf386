"""W6 (revision 3): a paused queue's runs are not begun; the rest of the work goes on."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_leasejobs import RunStatus, pause_queue, resume_queue, start
from django_leasejobs.exceptions import InvalidNote
from django_leasejobs.models import PausedQueue, Run
from django_leasejobs.resting import due_in
from tests.models import PassLog
from tests.processes import Lines, django_command
from tests.utils import fresh, statements, stop_worker, wait_for

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
def test_w6_a_pass_in_flight_finishes_and_a_worker_sees_pause_and_resume(tmp_path):
    """With a real worker process: the pass in flight when the queue is paused finishes;
    the runs behind it wait until the queue is resumed, then are driven."""
    gate = tmp_path / "paused"  # the pass in flight is held until the queue is paused
    first = start("tests.concurrent", {"sleep": 60, "until_file": str(gate)}, instance="in-flight")
    first = first.run
    # -v 2: every drive prints its report, so the test counts drives, not seconds.
    worker = django_command(
        "rundueJobs", "--loop", "--interval", "0.2", "--job", "tests.concurrent", "-v", "2"
    )
    drives = Lines(worker.stdout)
    try:
        began = PassLog.objects.filter(run_id=first.pk)
        wait_for(began.exists, "the first pass to begin", worker=worker)
        assert pause_queue("default", by="ops")
        behind = [start("tests.concurrent", {"sleep": 0}, instance=f"b{n}").run for n in range(3)]
        gate.touch()
        wait_for(lambda: fresh(first).status == RunStatus.DONE, "the pass in flight to finish")
        drives.skip()
        drives.wait_for(lambda line: "attempted=0" in line, "three drives after it", count=3)
        assert not PassLog.objects.filter(run_id__in=[run.pk for run in behind]).exists()
        assert resume_queue("default", by="ops")
        wait_for(
            lambda: Run.objects.filter(pk__in=[r.pk for r in behind], status="done").count() == 3,
            "the runs behind it, once resumed",
            worker=worker,
        )
    finally:
        worker.terminate()
        code = worker.wait(60)
    assert code == 0, drives.seen


# -- revision 4: a pause stops the drive in progress ------------------------------------------


def _pausing_handler(paused):
    import threading

    first = threading.Lock()  # at N = 4, the passes in flight beside the first race to it

    def handler(p):
        from tests.models import PassLog

        PassLog.objects.create(run_id=p.run.id, pid=0, started_ns=0, ended_ns=0)
        with first:
            if not paused:
                paused.append(pause_queue("mail", by="ops", note="mid-drive"))
        return p.done()

    return handler


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("concurrency", [1, 4])
def test_w6_a_pause_mid_drive_stops_it_and_gives_the_claims_made_ahead_back_uncharged(
    define, drive, concurrency
):
    """Revision 4: the drive read 30 runs of ``mail`` as due; its first pass pauses the
    queue. No pass begins after that (only those already in flight on other threads
    finish), and every claim made ahead is let go: not an attempt, not a miss."""
    paused: list[bool] = []
    spec = define("t.w6.mid", _pausing_handler(paused))
    runs = [start(spec, instance=f"m{n}", queue="mail").run for n in range(30)]

    report = drive(spec, concurrency=concurrency)

    assert paused == [True]
    ran = set(PassLog.objects.values_list("run_id", flat=True))
    # At N = 1 only the pass that paused; at N = 4 at most the passes in flight with it.
    assert 1 <= len(ran) <= concurrency
    assert report.attempted == report.completed == len(ran)
    assert (report.superseded, report.throttled, report.errors) == (0, 0, [])
    for run in runs:
        stored = fresh(run)
        if run.pk in ran:
            assert stored.status == RunStatus.DONE
            continue
        assert stored.status == RunStatus.RUNNING
        assert (stored.attempts, stored.admission_misses, stored.failure_code) == (0, None, "")
        assert (stored.lease_owner, stored.lease_began_at) == (None, None)
    assert drive(spec).attempted == 0  # still paused
    assert resume_queue("mail", by="ops")
    assert drive(spec, limit=100).completed == 30 - len(ran)


@pytest.mark.django_db(transaction=True)
@pytest.mark.concurrency
@pytest.mark.parametrize("concurrency", [1, 4])
def test_w6_no_pass_of_a_paused_queue_begins_a_second_after_pause_queue_returns(concurrency):
    """Revision 4, with a real worker process mid-way through a snapshot of 200 runs.

    Each pass notes its BEGIN as the database stamped it (``tests.paused_walk``). A run of
    another queue started at the pause is driven only by a drive that reads a new
    snapshot, so once it is done the drive in progress at the pause has ended: by then
    no pass of the paused queue began more than a second after ``pause_queue()``
    returned -- none at all, in fact, but those in flight at the pause -- and every
    run not driven is due again, uncharged.
    """
    from django_leasejobs import start_many
    from django_leasejobs.clock import DatabaseClock
    from tests.models import Begun
    from tests.utils import wait_for

    job = "tests.paused_walk"
    items = [(f"r{n}", {"sleep": 0.05}) for n in range(200)]
    runs = [result.run.pk for result in start_many(job, items)]
    worker = django_command(
        "rundueJobs", "--loop", "--interval", "0.2", "--limit", "500",
        "--concurrency", str(concurrency), "--job", job,
    )  # fmt: skip
    try:
        wait_for(lambda: Begun.objects.count() >= 10, "passes to begin", worker=worker)
        assert pause_queue("default", by="ops", note="upstream down")
        returned = DatabaseClock().now("default")
        begun_at_pause = Begun.objects.count()
        sentinel = start(job, {"sleep": 0}, instance="sentinel", queue="other").run
        wait_for(lambda: fresh(sentinel).status == RunStatus.DONE, "the next drive", worker=worker)
        wait_for(
            lambda: not Run.objects.filter(pk__in=runs, lease_owner__isnull=False).exists(),
            "every claim of the paused queue to be let go",
            worker=worker,
        )
        late = Begun.objects.filter(run_id__in=runs, began_at__gt=returned + timedelta(seconds=1))
        assert not late.exists(), list(late)
        # Only the passes in flight when the pause committed began after it was counted.
        assert Begun.objects.filter(run_id__in=runs).count() <= begun_at_pause + concurrency
        undriven = Run.objects.filter(pk__in=runs, status=RunStatus.RUNNING)
        assert undriven.count() == len(runs) - Begun.objects.filter(run_id__in=runs).count()
        assert not undriven.exclude(attempts=0, admission_misses=None, failure_code="").exists()
    finally:
        stop_worker(worker)
