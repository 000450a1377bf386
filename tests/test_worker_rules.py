"""The worker rules of SPEC revision 2: W1 backlog, W2 wake-up, W3 one-shot budget.

No wall-clock assertions: W1 is read off the drives' reports, W3 off the
worker's monotonic clock moved by the handler, and W2 off what a real worker
process did -- it woke for a commit it could only have heard of, and did not
for a rollback.
"""

from __future__ import annotations

import signal
import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.utils import timezone

from django_leasejobs import Retry, RunStatus, start
from django_leasejobs.listener import Listener
from django_leasejobs.models import Run
from django_leasejobs.worker import Worker
from tests.processes import Lines, django_command, resting
from tests.utils import wait_for

WAIT = 60  # seconds: the longest any wait below may take before the test fails
#: The --interval of a W2 worker that must be woken: ten times WAIT, so that only a
#: notification explains a wake within WAIT, however busy the machine.
ASLEEP = "600"


# -- W1 backlog -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_w1_a_loop_worker_with_default_options_drives_again_at_once_while_work_waits(monkeypatch):
    from django_leasejobs import worker as worker_module

    for n in range(12):  # 3 x --limit
        start("tests.noop", instance=f"backlog-{n}")
    drives: list[int] = []
    rests: list[tuple[int, float]] = []
    drive = worker_module.run_due_jobs

    def recorded(**options):
        report = drive(**options)
        drives.append(report.attempted)
        return report

    def rest(self):
        rests.append((len(drives), self.interval))
        self.stop()  # the backlog is gone: end the loop here

    monkeypatch.setattr(worker_module, "run_due_jobs", recorded)
    monkeypatch.setattr(Worker, "_rest", rest)
    # The test's transaction is the connection: keep it between drives.
    monkeypatch.setattr(worker_module, "close_old_connections", lambda: None)
    call_command("rundueJobs", "--loop", "--limit", "4", "--job", "tests.noop", verbosity=0)
    assert drives == [4, 4, 4, 0]
    # One rest in all, of the default interval, and only after the drive that found nothing.
    assert rests == [(4, 5.0)]
    assert Run.objects.filter(status=RunStatus.DONE).count() == 12


@pytest.mark.django_db
def test_w1_a_drive_that_could_not_run_is_followed_by_a_rest(monkeypatch):
    from django.db import OperationalError

    outcomes = iter([OperationalError("connection refused"), None])
    rests = []

    def drive(**options):
        outcome = next(outcomes)
        if outcome is not None:
            raise outcome
        raise AssertionError("the worker drove again without resting")

    def rest(self):
        rests.append(self.interval)
        self.stop()

    monkeypatch.setattr("django_leasejobs.worker.run_due_jobs", drive)
    monkeypatch.setattr("django_leasejobs.worker.close_old_connections", lambda: None)
    monkeypatch.setattr(Worker, "_rest", rest)
    Worker(interval=5.0).run()
    assert rests == [5.0]


# -- W3 one-shot budget ---------------------------------------------------------------------------


def _ten_second_passes(define, worker_clock):
    def handler(p):
        worker_clock.now += 10  # each pass takes ten seconds by the worker's clock
        return p.done()

    return define("t.w3.slow", handler, lease=timedelta(minutes=5))


@pytest.mark.django_db
@pytest.mark.parametrize("limit", [["--limit", "1"], []], ids=["a drive per run", "one drive"])
def test_w3_max_seconds_begins_no_pass_past_the_budget_and_reports_the_whole(
    define, worker_clock, capsys, limit
):
    spec = _ten_second_passes(define, worker_clock)
    for n in range(5):
        start(spec, instance=f"r{n}")
    call_command("rundueJobs", "--max-seconds", "25", "--job", spec.name, *limit)
    out = capsys.readouterr().out
    # Passes began at 0 s, 10 s and 20 s; the one at 30 s would be past the budget.
    assert "attempted=3 advanced=0 completed=3" in out
    assert out.count("attempted=") == 1  # one combined report, however many drives
    assert Run.objects.filter(job=spec.name, status=RunStatus.RUNNING).count() == 2


@pytest.mark.django_db
def test_w3_max_seconds_exits_at_the_first_drive_that_finds_nothing(define, capsys, monkeypatch):
    from django_leasejobs import driver

    spec = define("t.w3.quick", lambda p: p.done())
    for n in range(3):
        start(spec, instance=f"q{n}")
    drives = []
    drive = driver.run_due_jobs

    def recorded(**options):
        report = drive(**options)
        drives.append(report.attempted)
        return report

    monkeypatch.setattr(driver, "run_due_jobs", recorded)
    call_command("rundueJobs", "--max-seconds", "3600", "--limit", "2", "--job", spec.name)
    assert drives == [2, 1, 0]
    assert "attempted=3 advanced=0 completed=3" in capsys.readouterr().out


@pytest.mark.django_db
def test_w3_max_seconds_json_report_is_the_combined_drive(define, worker_clock, capsys):
    import json

    spec = _ten_second_passes(define, worker_clock)
    for n in range(4):
        start(spec, instance=f"j{n}")
    call_command("rundueJobs", "--max-seconds", "15", "--limit", "1", "--job", spec.name, "--json")
    report = json.loads(capsys.readouterr().out)
    assert (report["attempted"], report["completed"]) == (2, 2)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "args", [["--max-seconds", "0"], ["--max-seconds", "x"], ["--loop", "--max-seconds", "5"]]
)
def test_w3_bad_max_seconds_is_refused(args):
    from django.core.management import CommandError

    with pytest.raises(CommandError):
        call_command("rundueJobs", *args)


# -- W2 wake-up ----------------------------------------------------------------------------------


@pytest.fixture
def listener():
    """A worker's LISTEN connection on PostgreSQL, closed after; ``None`` where it polls."""
    opened = Listener.open()
    if connection.vendor != "postgresql":
        assert opened is None
        yield None
        return
    assert opened is not None
    yield opened
    opened.close()


def _worker(*, interval: str, env: dict[str, str] | None = None):
    # -v 2: every drive prints its report, an idle one too (D5), so a test reads each drive.
    worker = django_command(
        "rundueJobs", "--loop", "--interval", interval, "--job", "tests.noop", "-v", "2", env=env
    )
    return worker, Lines(worker.stdout)


def _stop(worker) -> str:
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
    try:
        _out, err = worker.communicate(timeout=WAIT)
    finally:
        if worker.poll() is None:
            worker.kill()
    return err


def _wait_done(run, what: str, worker) -> None:
    wait_for(lambda: Run.objects.get(pk=run.pk).status == RunStatus.DONE, what, worker=worker)


@pytest.mark.django_db(transaction=True)
@pytest.mark.concurrency
def test_w2_a_worker_on_listen_wakes_for_a_commit_and_not_for_a_rollback():
    worker, lines = _worker(interval=ASLEEP)
    try:
        first = lines.next(WAIT)
        assert first is not None, _stop(worker)
        assert "attempted=0" in first  # the first drive found nothing; now it listens
        if connection.vendor != "postgresql":
            # W2: SQLite and MariaDB poll. With a long interval nothing wakes it early.
            # After its report the worker reads when its next run is due (W1): a start
            # landing before that read would be driven at once, rightly. Start it once
            # the worker is resting.
            wait_for(lambda: resting(worker), "the worker to rest", worker=worker)
            start("tests.noop", instance="kept")
            assert lines.next(3) is None  # 3 s at least: a lower bound on the quiet seen
            return
        with transaction.atomic():
            start("tests.noop", instance="rolled-back")
            transaction.set_rollback(True)
        assert lines.next(3) is None  # no notification for a rollback, so no drive
        kept = start("tests.noop", instance="kept").run
        woke = lines.next(WAIT)
        assert woke is not None, "the worker slept through a committed start()"
        assert "completed=1" in woke
        _wait_done(kept, "the woken drive's run", worker)
    finally:
        err = _stop(worker)
    assert "polling" not in err, err


@pytest.mark.django_db(transaction=True)
@pytest.mark.concurrency
@pytest.mark.parametrize("listen", ["elsewhere", "off"])
def test_w2_a_worker_that_hears_nothing_says_so_once_and_polls(listen):
    # "elsewhere": the worker LISTENs on another database of the same server,
    # which never hears the runs' NOTIFY -- what a transaction-pooling PgBouncer
    # does. "off": NOTIFY = False. Either way it polls every --interval.
    if connection.vendor != "postgresql" and listen == "elsewhere":
        listen = "off"  # another database's LISTEN is PostgreSQL's; elsewhere W2 always polls
    worker, lines = _worker(interval="0.2", env={"LEASEJOBS_TEST_LISTEN": listen})
    try:
        assert lines.next(WAIT) is not None
        run = start("tests.noop", instance="polled").run
        _wait_done(run, "a polling worker to pick the run up", worker)
    finally:
        err = _stop(worker)
    warned = err.count("LISTEN heard nothing of its own NOTIFY")
    assert warned == (1 if listen == "elsewhere" else 0), err


@pytest.mark.django_db(transaction=True)
@pytest.mark.concurrency
def test_w2_a_worker_whose_listen_connection_dies_polls_and_keeps_its_runs_moving():
    if connection.vendor != "postgresql":
        assert Listener.open() is None  # nothing to lose: SQLite and MariaDB poll (W2)
        return
    worker, lines = _worker(interval="0.2")
    try:
        assert lines.next(WAIT) is not None
        deadline = time.monotonic() + WAIT
        killed = 0
        while not killed and time.monotonic() < deadline:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE query = %s AND datname = current_database() "
                    "AND pid <> pg_backend_pid()",
                    ["LISTEN django_leasejobs"],
                )
                (killed,) = cursor.fetchone()
        assert killed == 1
        run = start("tests.noop", instance="after").run
        _wait_done(run, "the worker to drive on once LISTEN was lost", worker)
        assert worker.poll() is None
    finally:
        err = _stop(worker)
    assert "LISTEN connection lost" in err, err


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "write",
    [
        "start",
        "start_past",
        "start_many",
        "follow_up",
        "retry",
        "release",
        "run_now",
        "schedule",
        "enqueue",
    ],
)
def test_w2_every_write_that_makes_a_run_due_sooner_notifies_at_commit(
    listener, write, define, drive
):
    from django_leasejobs import operators, start_many
    from django_leasejobs.store import claims
    from django_leasejobs.store.base import CHANNEL

    if listener is None:
        return  # SQLite and MariaDB poll: nothing is listened for (W2)
    stopping = lambda: False  # noqa: E731
    assert not listener.wait(0.05, stopping)  # the self-test's own is read already
    if write == "start":
        start("tests.noop", instance="n")
    elif write == "enqueue":
        from tests import tasks

        tasks.add.enqueue(1, 2)  # a Django task's run: the same INSERT, the same NOTIFY (§9)
    elif write == "start_past":
        start("tests.noop", instance="late", run_after=timezone.now() - timedelta(seconds=1))
    elif write == "start_many":
        start_many("tests.noop", [("a", 1), ("b", 2)])
    elif write == "follow_up":
        spec = define("t.w2.kicked", lambda p: p.done())
        start(spec)
        start(spec, again=True)
        _drain_notifications(listener)
        drive(spec)  # the finishing commit starts the follow-up
    elif write == "retry":
        spec = define("t.w2.fails", lambda p: 1 / 0, retry=Retry(max_attempts=1))
        failed = start(spec).run
        drive(spec)
        _drain_notifications(listener)
        operators.retry(failed.pk, by="ops")
    elif write == "release":
        spec = define("t.w2.held", lambda p: p.done(), safe_to_repeat=False)
        held = start(spec).run
        Run.objects.filter(pk=held.pk).update(status=RunStatus.HELD, next_attempt_at=None)
        _drain_notifications(listener)
        operators.release(held.pk, resume=True, by="ops")
    elif write == "run_now":
        spec = define("t.w2.cron", lambda p: p.done(), schedule="0 3 * * *")
        drive(spec)  # creates its schedule row
        _drain_notifications(listener)
        operators.run_now(spec, by="ops")
    elif write == "schedule":
        spec = define("t.w2.due", lambda p: p.done(), schedule="* * * * *")
        drive(spec)  # creates its schedule row, due next minute
        from django_leasejobs.models import Schedule

        Schedule.objects.filter(job=spec.name).update(next_due_at=claims.now())
        _drain_notifications(listener)
        drive(spec)  # fires it: a run starts
    assert listener.wait(WAIT, stopping), f"{write} sent no NOTIFY on {CHANNEL}"


def _drain_notifications(listener):
    while listener.wait(0.05, lambda: False):
        pass


@pytest.mark.django_db(transaction=True)
def test_w2_a_listener_reads_out_what_came_while_it_was_busy(listener):
    # A busy worker does not wait on its LISTEN connection; what arrives then
    # must still be read, or the server's notification queue cannot be trimmed.
    if listener is None:
        return  # SQLite and MariaDB poll: nothing is listened for (W2)
    for n in range(5):
        start("tests.noop", instance=f"busy-{n}")  # five transactions, five notifications
    deadline = time.monotonic() + WAIT
    heard = 0
    while heard < 5 and time.monotonic() < deadline:
        heard += listener.drain()
    assert heard == 5
    assert listener.drain() == 0  # read out: nothing is left behind
    assert not listener.wait(0.05, lambda: False)


def test_w2_the_loop_reads_its_notifications_after_every_drive_that_did_work(monkeypatch):
    from django_leasejobs.driver import DriveReport

    reports = iter([DriveReport(attempted=2), DriveReport(attempted=1), DriveReport()])
    events = []

    class Ear:
        def drain(self):
            events.append("drain")
            return 1

        def wait(self, timeout, stopping):
            events.append("wait")
            worker.stop()
            return False

        def close(self):
            events.append("close")

    monkeypatch.setattr("django_leasejobs.worker.run_due_jobs", lambda **options: next(reports))
    monkeypatch.setattr("django_leasejobs.worker.close_old_connections", lambda: None)
    monkeypatch.setattr("django_leasejobs.worker.Listener.open", classmethod(lambda cls: Ear()))
    worker = Worker(interval=5.0)
    worker.run()
    assert events == ["drain", "drain", "wait", "close"]


@pytest.mark.django_db(transaction=True)
def test_w2_a_run_due_later_wakes_nobody(listener):
    from django_leasejobs import start_many

    if listener is None:
        return  # SQLite and MariaDB poll: nothing is listened for (W2)
    later = timezone.now() + timedelta(hours=1)
    start("tests.noop", instance="later", run_after=later)
    start_many("tests.noop", [("later-a", 1), ("later-b", 2)], run_after=later)
    assert not listener.wait(0.5, lambda: False)  # the drive after it is due finds it


@pytest.mark.django_db(transaction=True)
def test_w2_a_listen_connection_dropped_during_its_self_test_means_polling(monkeypatch, caplog):
    # The self-test runs on psycopg's own connection, whose errors are not
    # Django's: a worker whose LISTEN dies right there must poll, not crash.
    if connection.vendor != "postgresql":
        assert Listener.open() is None
        return
    self_test = Listener._self_test

    def dropped_first(listener, runs):
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(%s)", [listener._wrapper.connection.info.backend_pid]
            )
        return self_test(listener, runs)

    monkeypatch.setattr(Listener, "_self_test", dropped_first)
    with caplog.at_level("WARNING", logger="django_leasejobs"):
        assert Listener.open() is None
    assert "LISTEN is not possible" in caplog.text
