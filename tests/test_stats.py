"""O1 (revision 3): pass statistics, counted per process and flushed as increments."""

from __future__ import annotations

import subprocess
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.db import OperationalError, connection
from django.db.models import Sum
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from prometheus_client.parser import text_string_to_metric_families

from django_leasejobs import start
from django_leasejobs.clock import get_clock
from django_leasejobs.models import PassStat, PassStatHalfHour
from django_leasejobs.models.observability import BUCKET_FIELDS, BUCKETS
from django_leasejobs.retention import prune_stats
from django_leasejobs.stats import aggregate
from tests.processes import django_command, run_together, with_wall_clock_off
from tests.utils import on_a_server_only, statements, user_with


def _counts(job: str) -> dict[str, int]:
    rows = PassStat.objects.filter(job=job).values_list("outcome").annotate(n=Sum("count"))
    return dict(rows)


@pytest.mark.django_db
def test_o1_k_passes_are_counted_exactly_by_job_queue_and_outcome_after_the_flush(define, drive):
    def handler(p):
        if p.payload == "fails":
            raise RuntimeError("no")
        return p.done()

    spec = define("t.stats.k", handler)
    for n in range(7):
        start(spec, "ok", instance=f"ok{n}", queue="mail")
    for n in range(3):
        start(spec, "fails", instance=f"bad{n}", queue="mail")
    drive(spec)
    assert not PassStat.objects.exists()  # nothing is written per pass
    assert aggregate.flush(force=True) >= 2
    assert _counts(spec.name) == {"completed": 7, "retrying": 3}
    assert set(PassStat.objects.filter(job=spec.name).values_list("queue", flat=True)) == {"mail"}
    row = PassStat.objects.get(job=spec.name, outcome="completed")
    assert sum(row.buckets) == row.count == 7
    assert 0 <= row.max_seconds <= row.total_seconds


@pytest.mark.django_db(transaction=True)
def test_o1_four_processes_flushing_at_once_lose_no_increment():
    rounds, passes = 20, 5
    run_together("tests.processes.count_and_flush", 4, rounds, passes)
    counts = _counts("t.stats.shared")
    assert counts == {"completed": 4 * rounds * passes, "failed": 4 * rounds * passes}
    failed = PassStat.objects.filter(job="t.stats.shared", outcome="failed")
    assert failed.aggregate(longest=Sum("max_seconds"))["longest"] > 0
    assert all(row.le_05 == row.count for row in failed)  # 0.2 s: the (0.1, 0.25] bucket


@pytest.mark.django_db
def test_o1_durations_land_in_their_fixed_buckets():
    for seconds in (0.001, 0.005, 0.0051, 0.3, 1000):
        aggregate.observe("t.stats.buckets", "default", "completed", seconds)
    aggregate.flush(force=True)
    row = PassStat.objects.get(job="t.stats.buckets")
    assert row.count == 5
    assert (row.le_00, row.le_01, row.le_06) == (2, 1, 1)  # <=5 ms twice, <=10 ms, <=0.5 s
    assert row.buckets[-1] == 1  # past the last bound: only in count (+Inf)
    assert len(BUCKET_FIELDS) == len(BUCKETS)
    assert row.max_seconds == 1000


@pytest.mark.django_db
def test_o1_a_flush_that_fails_never_fails_a_pass_and_keeps_its_counts(
    define, drive, monkeypatch, caplog
):
    spec = define("t.stats.fails", lambda p: p.done())
    start(spec, instance="a")

    def refused(rows):
        raise OperationalError("the database went away")

    monkeypatch.setattr("django_leasejobs.stats.add_stats", refused)
    report = drive(spec)
    assert report.completed == 1
    assert aggregate.flush(force=True) == 0  # logged, never raised
    assert "Pass statistics not written" in caplog.text
    monkeypatch.undo()
    assert aggregate.flush(force=True) == 1  # the next flush writes what was kept
    assert _counts(spec.name) == {"completed": 1}


@pytest.mark.django_db
def test_o1_stats_off_counts_nothing(define, drive, settings):
    settings.LEASEJOBS = {**getattr(settings, "LEASEJOBS", {}), "STATS": False}
    spec = define("t.stats.off", lambda p: p.done())
    start(spec)
    drive(spec)
    assert aggregate.flush(force=True) == 0
    assert not PassStat.objects.exists()


@pytest.mark.django_db
def test_o1_a_flush_waits_for_stats_every(settings):
    settings.LEASEJOBS = {**getattr(settings, "LEASEJOBS", {}), "STATS_EVERY": timedelta(hours=1)}
    aggregate.forget()
    aggregate.observe("t.stats.every", "default", "completed", 0.01)
    assert 3500 < aggregate.due_in() <= 3600
    assert aggregate.flush() == 0  # not due yet
    assert aggregate.flush(force=True) == 1


@pytest.mark.django_db
def test_o1_rows_past_stats_retention_are_pruned(frozen_clock):
    now = frozen_clock.now()
    PassStat.objects.create(
        minute=now - timedelta(days=31), job="j", queue="q", outcome="completed"
    )
    kept = PassStat.objects.create(
        minute=now - timedelta(days=29), job="j", queue="q", outcome="completed"
    )
    assert prune_stats(batch_size=1) == 1
    assert list(PassStat.objects.values_list("pk", flat=True)) == [kept.pk]


@pytest.mark.django_db(transaction=True)
def test_o1_a_cron_one_shot_flushes_its_figures_at_exit():
    for n in range(3):
        start("tests.noop", instance=f"c{n}")
    command = django_command("rundueJobs", "--job", "tests.noop")
    _out, err = command.communicate(timeout=120)
    assert command.returncode == 0, err
    assert _counts("tests.noop") == {"completed": 3}


# -- revision 4: on the database's clock --------------------------------------------------------

NOON = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _minutes(job: str) -> dict[tuple[datetime, str], int]:
    rows = PassStat.objects.filter(job=job).values_list("minute", "outcome", "count")
    return {(minute, outcome): n for minute, outcome, n in rows}


def _tick(frozen_clock, worker_clock, seconds: float) -> None:
    """Time passes, on the database's clock and on this process's monotonic clock alike."""
    frozen_clock.advance(timedelta(seconds=seconds))
    worker_clock.now += seconds


@pytest.mark.django_db
def test_o1_r4_each_pass_is_counted_in_the_minute_of_the_database_clock(
    frozen_clock, worker_clock, monkeypatch
):
    """The database says 12:00:10; this process's wall clock says 11:40 and is never read."""
    monkeypatch.setattr("time.time", lambda: frozen_clock.now().timestamp() - 20 * 60)
    frozen_clock.set(NOON + timedelta(seconds=10))
    aggregate.observe("t.stats.clock", "default", "completed", 0.01)  # 12:00:10
    _tick(frozen_clock, worker_clock, 55)
    aggregate.observe("t.stats.clock", "default", "failed", 0.2)  # 12:01:05
    _tick(frozen_clock, worker_clock, 2)
    assert aggregate.flush(force=True) == 2  # at 12:01:07: each pass in its own minute
    _tick(frozen_clock, worker_clock, 60)
    aggregate.observe("t.stats.clock", "default", "completed", 0.01)  # 12:02:07
    _tick(frozen_clock, worker_clock, 1)
    assert aggregate.flush(force=True) == 1
    assert _minutes("t.stats.clock") == {
        (NOON, "completed"): 1,
        (NOON + timedelta(minutes=1), "failed"): 1,
        (NOON + timedelta(minutes=2), "completed"): 1,
    }


@pytest.mark.django_db
def test_o1_r4_a_pass_in_a_minute_s_last_half_second_is_in_that_minute(frozen_clock, worker_clock):
    """A pass is placed at the start of its second, never after it ended: one that ended
    at 12:00:59.7 is in 12:00, which a window read at once holds (placed at the second's
    middle it fell in 12:01, which no window read before 12:01 holds)."""
    frozen_clock.set(NOON + timedelta(seconds=59.7))
    aggregate.observe("t.stats.edge", "default", "completed", 0.01)
    assert aggregate.flush(force=True) == 1
    assert _minutes("t.stats.edge") == {(NOON, "completed"): 1}


@pytest.mark.django_db
def test_o1_r4_the_offset_is_measured_at_each_flush_not_assumed(frozen_clock, worker_clock):
    """The database's clock moved an hour (a restore, a corrected server): the next flush
    places the passes since the last one on it, as the windows read it."""
    frozen_clock.set(NOON)
    aggregate.observe("t.stats.offset", "default", "completed", 0.01)
    assert aggregate.flush(force=True) == 1
    frozen_clock.advance(timedelta(hours=1))
    aggregate.observe("t.stats.offset", "default", "completed", 0.01)
    assert aggregate.flush(force=True) == 1
    assert _minutes("t.stats.offset") == {
        (NOON, "completed"): 1,
        (NOON + timedelta(hours=1), "completed"): 1,
    }


@pytest.mark.django_db
def test_o1_r4_a_clock_read_that_fails_keeps_each_pass_at_its_own_minute(
    frozen_clock, worker_clock, monkeypatch, caplog
):
    frozen_clock.set(NOON + timedelta(seconds=10))
    aggregate.observe("t.stats.later", "default", "completed", 0.01)  # 12:00:10

    def refused(using="default"):
        raise OperationalError("the database went away")

    with monkeypatch.context() as patched:
        patched.setattr(frozen_clock, "now", refused)
        assert aggregate.flush(force=True) == 0  # logged, never raised
    assert "Pass statistics not written" in caplog.text
    _tick(frozen_clock, worker_clock, 180)
    assert aggregate.flush(force=True) == 1  # three minutes later, at the pass's minute
    assert _minutes("t.stats.later") == {(NOON, "completed"): 1}


@pytest.mark.django_db
def test_o1_r4_a_flush_costs_the_same_statements_however_many_seconds_it_carries(worker_clock):
    """One read of the database's clock and one upsert into each of the minutes and the
    half-hours (O4), in one transaction, for one pass or 1 200 over ten minutes."""

    def statements_of_a_flush() -> list[str]:
        with CaptureQueriesContext(connection) as captured:
            assert aggregate.flush(force=True) > 0
        # F11's lock timeout on PostgreSQL (SET LOCAL): a setting of the transaction, no data.
        return [sql for sql in statements(captured) if not sql.startswith("SET LOCAL")]

    aggregate.observe("t.stats.cost", "default", "completed", 0.01)
    one = statements_of_a_flush()
    assert len(one) == 3
    assert "passstat" not in one[0].lower()  # the clock
    assert [sql.split("(")[0].lower().split()[-1].strip('"`') for sql in one[1:]] == [
        "leasejobs_passstat",
        "leasejobs_passstathalfhour",
    ]
    for _ in range(600):
        worker_clock.now += 1
        aggregate.observe("t.stats.cost", "default", "completed", 0.01)
        aggregate.observe("t.stats.cost", "default", "failed", 0.2)
    assert len(statements_of_a_flush()) == len(one)
    assert sum(_minutes("t.stats.cost").values()) == 1201
    halves = PassStatHalfHour.objects.filter(job="t.stats.cost").aggregate(n=Sum("count"))
    assert halves["n"] == 1201


# -- a real worker whose wall clock is off (libfaketime) -----------------------------------------

TOKEN = "clock-token-0123456789abcdef"


def _finished(process: subprocess.Popen, timeout: float = 120) -> str:
    """What *process* wrote once it exited 0; it is killed if the test fails first."""
    try:
        out, err = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    return out


def _passes_15m(client: Client) -> int:
    """The completed passes of ``tests.noop`` the metrics view shows for the last 15 minutes."""
    with override_settings(
        LEASEJOBS={**getattr(settings, "LEASEJOBS", {}), "METRICS_TOKEN": TOKEN}
    ):
        response = client.get("/metrics/leasejobs", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200, response.content
    families = text_string_to_metric_families(response.content.decode())
    return int(
        sum(
            sample.value
            for family in families
            for sample in family.samples
            if sample.name == "leasejobs_passes_15m"
            and sample.labels.get("outcome") == "completed"
            and "tests.noop" in sample.labels.values()
        )
    )


def _passes_last_hour(client: Client) -> int:
    """The passes of ``tests.noop`` the overview's per-job table shows for the last hour."""
    client.force_login(user_with("view_run"))
    response = client.get("/admin/leasejobs/pausedqueue/overview/", {"window": "hour"})
    assert response.status_code == 200
    jobs = {row["figures"].job: row["figures"].passes for row in response.context["jobs"]}
    return jobs.get("tests.noop", 0)


@pytest.mark.tools
@pytest.mark.concurrency
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("concurrency", [1, 4])
@pytest.mark.parametrize(("offset", "seconds"), [("-20m", -1200), ("+10m", 600)])
@on_a_server_only
def test_o1_r4_a_worker_whose_wall_clock_is_off_shows_in_every_window(
    offset, seconds, concurrency, client
):
    """A cron one-shot on a machine whose clock is 20 minutes behind (or 10 ahead): its
    passes show in the view's last 15 minutes and in the overview's last hour."""
    out = _finished(with_wall_clock_off(offset, "shell", "-c", "import time; print(time.time())"))
    assert abs(float(out.split()[-1]) - time.time() - seconds) < 60, "the clock is not off"
    for n in range(3):
        start("tests.noop", instance=f"clock{n}")
    drive = ("rundueJobs", "--job", "tests.noop", "--concurrency", str(concurrency))
    out = _finished(with_wall_clock_off(offset, *drive))
    assert "completed=3" in out, out
    written = _minutes("tests.noop")
    now = get_clock().now()
    assert sum(written.values()) == 3
    assert all(abs((now - minute).total_seconds()) < 180 for minute, _ in written), (now, written)
    assert _passes_15m(client) == 3
    assert _passes_last_hour(client) == 3
