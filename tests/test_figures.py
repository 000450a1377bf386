"""The figures the overview and the metrics view read (SPEC §16: O2, O4, O5)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_leasejobs import RunStatus, pause_queue
from django_leasejobs.figures import attention, coarse_window, percentile, queues, window
from django_leasejobs.models.observability import BUCKETS
from tests.factories import RunFactory
from tests.utils import (
    due_in_queue,
    flushed_stat,
    half_hour_row,
    on_sqlite_only,
    stat_columns,
    statements,
    store_text,
)

pytestmark = pytest.mark.django_db

MINUTE = timedelta(minutes=1)


def test_o2_o5_each_queue_has_its_due_depth_lag_and_pause(frozen_clock):
    now = frozen_clock.now()
    due_in_queue("mail", now, 0, 10, 20)
    due_in_queue("reports", now, -3600, prefix="later")
    pause_queue("idle", by="ops")
    found = {figures.queue: figures for figures in queues(now)}
    assert set(found) == {"mail", "reports", "idle"}
    assert (found["mail"].due, found["mail"].oldest_due_seconds, found["mail"].live) == (3, 20, 3)
    assert (found["reports"].due, found["reports"].oldest_due_seconds) == (0, None)
    assert found["idle"].paused is not None
    assert found["mail"].paused is None


def test_o2_o4_attention_counts_held_stalled_throttled_and_overdue(frozen_clock):
    now = frozen_clock.now()
    RunFactory(status=RunStatus.HELD)
    RunFactory(job="tests.noop", started_at=now - timedelta(hours=1))  # past STALL_AFTER
    RunFactory(job="tests.noop", started_at=now - timedelta(minutes=1))
    RunFactory(throttled_by="rate", lease_owner=None)
    figures = attention(now)
    assert (figures.held, figures.stalled, figures.throttled, figures.overdue) == (1, 1, 1, 0)
    assert figures.live == {"held": 1, "running": 3}


def test_s6_o2_stalled_counts_each_run_against_its_own_jobs_stall_after(define, frozen_clock):
    """Counted by the database: a job's own ``stall_after``, shorter or longer than
    ``STALL_AFTER``, and the default for a job without one or not registered here."""
    now = frozen_clock.now()
    define("t.stall.quick", lambda p: p.done(), stall_after=timedelta(minutes=5))
    define("t.stall.slow", lambda p: p.done(), stall_after=timedelta(days=2))
    ages = {
        "t.stall.quick": [timedelta(minutes=10), timedelta(minutes=1)],  # 1 stalled
        "t.stall.slow": [timedelta(days=1), timedelta(days=3)],  # 1 stalled
        "tests.noop": [timedelta(hours=1), timedelta(minutes=1)],  # 1 stalled (the default, 15 min)
        "gone.elsewhere": [timedelta(hours=2)],  # not registered here: the default, 1
    }
    for job, started in ages.items():
        for age in started:
            RunFactory(job=job, started_at=now - age)
    RunFactory(job="t.stall.quick", status=RunStatus.DONE, started_at=now - timedelta(days=9))
    assert attention(now).stalled == 4


def _stat(minute, outcome="completed", count=1, queue="q", **extra):
    """A minute's statistics row, added to its half-hour's as a flush adds it (O1)."""
    return flushed_stat(minute, job="t.f", queue=queue, outcome=outcome, count=count, **extra)


def test_o4_a_window_folds_its_minutes_into_intervals_outcomes_and_jobs(frozen_clock):
    start_at = frozen_clock.now().replace(second=0, microsecond=0) - timedelta(hours=1)
    _stat(start_at, count=4, le_00=4, total_seconds=0.01)
    _stat(start_at + MINUTE, count=2, le_07=2, total_seconds=1.5, max_seconds=0.9)
    _stat(start_at + 20 * MINUTE, outcome="retrying", count=1, le_07=1)
    found = window(start_at, start_at + timedelta(hours=1), timedelta(minutes=15))
    assert found.series == {start_at: {"completed": 6}, start_at + 15 * MINUTE: {"retrying": 1}}
    job = found.jobs["t.f"]
    assert (job.passes, job.failures) == (7, 1)
    assert job.failure_rate == pytest.approx(1 / 7)
    assert job.p50 is not None
    assert job.p50 <= BUCKETS[0]
    assert 0.5 < job.p95 <= 1.0
    assert found.by_key[("t.f", "q", "completed")][0] == 6
    assert found.unreadable == 0


def test_o4_s11_malformed_statistics_rows_are_counted_as_unreadable_never_raised(frozen_clock):
    at = frozen_clock.now().replace(second=0, microsecond=0) - timedelta(minutes=5)
    _stat(at, outcome="exploded", count=3)  # an outcome outside the vocabulary
    _stat(at + MINUTE, count=-2)  # a negative count
    _stat(at + 2 * MINUTE, count=1, le_00=5)  # more in its buckets than its count
    _stat(at + 3 * MINUTE, count=1, le_00=1, total_seconds=0.001)
    found = window(at, at + timedelta(minutes=10), MINUTE)
    assert found.unreadable == 3
    assert found.jobs["t.f"].passes == 1


def test_o4_percentiles_follow_the_histogram():
    buckets = [0] * (len(BUCKETS) + 1)
    assert percentile(buckets, 0.5, 0.0) is None
    buckets[0] = 10
    assert percentile(buckets, 0.5, 0.0) == pytest.approx(BUCKETS[0] / 2)
    buckets[-1] = 90
    assert percentile(buckets, 0.95, 400.0) == 400.0


@on_sqlite_only
@pytest.mark.parametrize("column", stat_columns())
def test_o4_s11_text_in_a_number_column_is_unreadable_minute_by_minute_and_summed(
    frozen_clock, column
):
    """SQLite keeps text in a number's column: never summed as 0, never a float() that raises."""
    at = frozen_clock.now().replace(second=0, microsecond=0) - 10 * MINUTE
    _stat(at, count=2, le_00=2, total_seconds=0.004, max_seconds=0.003)
    bad = _stat(at + MINUTE, count=3, total_seconds=900.0, max_seconds=400.0, queue="q2")  # 300 s+
    store_text(bad, column)
    store_text(half_hour_row(bad), column)  # as a restore or a hand edit of both tables
    since, until = at - 20 * MINUTE, at + 40 * MINUTE
    for found in (window(since, until, MINUTE), coarse_window(since, until, 30 * MINUTE)):
        assert found.unreadable == 1
        assert found.jobs["t.f"].passes == 2
        assert sum(sum(counts.values()) for counts in found.series.values()) == 2
        assert found.by_key == {("t.f", "q", "completed"): (2, 0.004, [2] + [0] * len(BUCKETS))}


@pytest.mark.parametrize("untimed", ["held", "throttled"])
def test_o1_o4_an_untimed_outcome_counts_as_passes_never_as_durations(frozen_clock, untimed):
    """A held takeover or a throttled pass ran no handler: its bookkeeping is no duration."""
    at = frozen_clock.now().replace(second=0, microsecond=0) - 10 * MINUTE
    _stat(at, count=2, le_07=2, total_seconds=1.5, max_seconds=0.9)  # (0.5, 1] s
    _stat(at, outcome=untimed, count=6, le_00=6, total_seconds=0.015, max_seconds=0.003)
    since, until = at - 20 * MINUTE, at + 40 * MINUTE
    for found in (window(since, until, MINUTE), coarse_window(since, until, 30 * MINUTE)):
        job = found.jobs["t.f"]
        assert (job.passes, job.failures) == (8, 6 if untimed == "held" else 0)
        assert sum(job.buckets) == 2
        assert (job.seconds, job.longest) == (1.5, 0.9)
        assert job.p50 == pytest.approx(0.75)  # the 1st of 2 in (0.5, 1]: 6 untimed would be 5 ms
        assert found.by_key[("t.f", "q", untimed)][0] == 6  # still passes, for O2's count


@pytest.mark.parametrize("intervals", [1, 2, 3, 5, 48])
def test_o4_coarse_window_places_each_minute_in_its_interval(frozen_clock, intervals):
    """The interval of a minute, at and around every edge, as window() folds it."""
    step = 7 * MINUTE
    until = frozen_clock.now().replace(second=0, microsecond=0)
    since = until - intervals * step
    for n in range(intervals):
        edge = since + n * step
        _stat(edge, count=n + 1)
        _stat(edge + step - MINUTE, outcome="failed", count=10 * (n + 1))
    _stat(until, count=1000)  # past the window
    _stat(since - MINUTE, count=1000)  # before it
    found = coarse_window(since, until, step)
    assert found.series == window(since, until, step).series
    assert found.series[since + (intervals - 1) * step] == {
        "completed": intervals,
        "failed": 10 * intervals,
    }


@pytest.mark.parametrize("span", [timedelta(days=1), timedelta(days=7)])
def test_o4_a_coarse_window_is_two_reads_built_once_whatever_its_intervals(frozen_clock, span):
    """Not a union of one aggregate per interval: the ORM built 168 of them slower than the
    database read an empty table (O4 on an empty site)."""
    until = frozen_clock.now()
    _stat(until - timedelta(hours=2), count=3)
    step = span / 48
    with CaptureQueriesContext(connection) as captured:
        found = coarse_window(until - span, until, step)
    sent = statements(captured)
    assert len(sent) == 2
    assert not any("UNION" in sql.upper() for sql in sent)
    assert sum(sum(counts.values()) for counts in found.series.values()) == 3
