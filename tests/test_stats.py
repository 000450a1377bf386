"""O1 (revision 3): pass statistics, counted per process and flushed as increments."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import OperationalError
from django.db.models import Sum

from django_leasejobs import start
from django_leasejobs.models import PassStat
from django_leasejobs.models.observability import BUCKET_FIELDS, BUCKETS
from django_leasejobs.retention import prune_stats
from django_leasejobs.stats import aggregate
from tests.processes import django_command, run_together


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
