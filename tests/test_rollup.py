"""O1/O4: the half-hours the day and week windows read, and the minutes they sum.

The flush adds each pass to its minute and its half-hour in one transaction
(:mod:`django_leasejobs.store.stats`); the overview's day and week read the
half-hours (:func:`django_leasejobs.figures.coarse_window`), the hour the
minutes. What the half-hours give must be what the minutes give.
"""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_leasejobs.admin.overview import SPANS, bounds
from django_leasejobs.figures import coarse_window, window
from django_leasejobs.models import PassStat, PassStatHalfHour
from django_leasejobs.states import PassOutcome
from django_leasejobs.stats import aggregate
from django_leasejobs.store.rollup import HalfHourOf, roll_up
from tests.utils import (
    flushed_stat,
    half_hour_row,
    on_sqlite_only,
    stat_columns,
    statements,
    store_text,
    user_with,
)

pytestmark = pytest.mark.django_db

MINUTE = timedelta(minutes=1)
OVERVIEW = "/admin/leasejobs/pausedqueue/overview/"
#: Durations a float sums exactly in any order (multiples of 1/256 s), each bucket and past
#: the last bound: the minutes' sums and the half-hours' are then equal to the last bit.
SECONDS = (1 / 256, 1 / 128, 0.03125, 0.125, 0.375, 0.75, 2.5, 4.0, 40.0, 400.0)


def _flush_a_week(frozen_clock, worker_clock, now):
    """Passes over eight days up to *now*, flushed as a worker flushes them: each batch of
    passes spread over up to 20 minutes of both clocks, so a flush crosses half-hours."""
    rng = random.Random(26)
    edges = [now - timedelta(hours=4 * n) for n in range(50)]  # the 4 h grid: the week's edges
    moments = sorted(
        [now - timedelta(seconds=rng.randrange(8 * 24 * 3600)) for _ in range(300)]
        + [edge - timedelta(seconds=s) for edge in edges for s in (0, 1, 30 * 60 + 1)]
    )
    for moment in moments:
        frozen_clock.set(moment)
        for _ in range(rng.randrange(1, 5)):
            aggregate.observe(
                rng.choice(["t.r.a", "t.r.b", "t.r.c"]),
                rng.choice(["default", "mail"]),
                rng.choice(PassOutcome.values),
                rng.choice(SECONDS),
            )
            step = rng.randrange(0, 400)
            frozen_clock.advance(timedelta(seconds=step))
            worker_clock.now += step
        assert aggregate.flush(force=True) > 0


@pytest.mark.parametrize("key", ["day", "week"])
def test_o1_o4_the_day_and_week_read_from_half_hours_equal_what_the_minutes_give(
    frozen_clock, worker_clock, key
):
    now = frozen_clock.now() + timedelta(minutes=17)
    _flush_a_week(frozen_clock, worker_clock, now)
    span = SPANS[key]
    since, until = bounds(now, span)
    with CaptureQueriesContext(connection) as read:
        halves = coarse_window(since, until, span.step)
    with CaptureQueriesContext(connection) as summed:
        minutes = coarse_window(since, until, span.step, minutes=True)
    rows = window(since, until, span.step)  # minute by minute, folded here
    assert all("leasejobs_passstathalfhour" in sql for sql in statements(read))
    assert not any("leasejobs_passstathalfhour" in sql for sql in statements(summed))
    assert sum(sum(counts.values()) for counts in rows.series.values()) > 100
    for found in (halves, minutes):
        assert found.series == rows.series
        assert found.by_key == rows.by_key
        assert found.jobs == rows.jobs
        assert found.unreadable == rows.unreadable == 0


def test_o4_a_window_off_the_half_hour_grid_reads_the_minutes(frozen_clock):
    """A half-hour row would straddle an interval or an end: the minutes are read."""
    at = frozen_clock.now()
    flushed_stat(at - 10 * MINUTE, count=3)
    for since, until, step in [
        (at - timedelta(hours=1), at, timedelta(minutes=15)),  # a step within a half-hour
        (at - timedelta(minutes=50), at + timedelta(minutes=10), timedelta(hours=1)),  # off grid
    ]:
        with CaptureQueriesContext(connection) as read:
            found = coarse_window(since, until, step)
        assert not any("leasejobs_passstathalfhour" in sql for sql in statements(read))
        assert sum(sum(counts.values()) for counts in found.series.values()) == 3


@pytest.mark.parametrize("key", ["day", "week"])
def test_o4_s11_a_malformed_half_hour_row_is_counted_unreadable_in_the_day_and_week(
    client, frozen_clock, key
):
    """A hand edit of the half-hours alone: the day and week count the row unreadable, the
    hour (the minutes) does not; the page shows the rest, never a 500."""
    at = frozen_clock.now() - 5 * MINUTE
    flushed_stat(at, count=2, le_00=2, total_seconds=0.004, max_seconds=0.003)
    edited = half_hour_row(flushed_stat(at, queue="q2", count=3, le_00=3))
    PassStatHalfHour.objects.filter(pk=edited.pk).update(count=-3)
    span = SPANS[key]
    since, until = bounds(frozen_clock.now(), span)
    assert coarse_window(since, until, span.step).unreadable == 1
    hour = SPANS["hour"]
    assert window(*bounds(frozen_clock.now(), hour), hour.step).unreadable == 0
    client.force_login(user_with("view_run"))
    response = client.get(OVERVIEW, {"window": key})
    assert response.status_code == 200
    assert "1 unreadable statistics row in this window" in response.content.decode()


@on_sqlite_only
@pytest.mark.parametrize("column", stat_columns())
def test_o4_s11_text_in_a_half_hour_rows_number_column_is_unreadable_never_summed(
    frozen_clock, column
):
    """SQLite keeps text in a number's column, in a half-hour's as in a minute's."""
    at = frozen_clock.now() - 10 * MINUTE
    flushed_stat(at, count=2, le_00=2, total_seconds=0.004, max_seconds=0.003)
    store_text(half_hour_row(flushed_stat(at, queue="q2", count=3, le_00=3)), column)
    since, until = at - 20 * MINUTE, at + 40 * MINUTE
    found = coarse_window(since, until, 30 * MINUTE)
    assert found.unreadable == 1
    assert found.by_key == {("t.a", "q", "completed"): (2, 0.004, [2] + [0] * 14)}
    assert sum(sum(counts.values()) for counts in found.series.values()) == 2
    assert coarse_window(since, until, 30 * MINUTE, minutes=True).unreadable == 0


def test_o1_a_flush_adds_each_minute_to_its_half_hour(frozen_clock, worker_clock):
    """12:29:50 and 12:30:10 in one flush: two minutes, two half-hours; a later flush of the
    same half-hour adds to it, and keeps the longest."""
    noon = frozen_clock.now()
    frozen_clock.set(noon + timedelta(minutes=29, seconds=50))
    aggregate.observe("t.r.edge", "default", "completed", 0.125)
    frozen_clock.advance(timedelta(seconds=20))
    worker_clock.now += 20
    aggregate.observe("t.r.edge", "default", "completed", 0.25)
    aggregate.observe("t.r.edge", "default", "completed", 0.5)
    assert aggregate.flush(force=True) == 2
    frozen_clock.advance(timedelta(minutes=5))
    worker_clock.now += 300
    aggregate.observe("t.r.edge", "default", "completed", 4.0)
    assert aggregate.flush(force=True) == 1
    halves = PassStatHalfHour.objects.filter(job="t.r.edge").order_by("half_hour")
    assert [(h.half_hour, h.count, h.total_seconds, h.max_seconds) for h in halves] == [
        (noon, 1, 0.125, 0.125),
        (noon + 30 * MINUTE, 3, 4.75, 4.0),
    ]
    assert halves[1].buckets == [0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0]
    assert PassStat.objects.filter(job="t.r.edge").count() == 3


@pytest.mark.parametrize("in_sql", [True, False], ids=["insert-select", "summed-here"])
def test_o1_the_minutes_rolled_up_equal_the_half_hours_the_flush_wrote(
    frozen_clock, worker_clock, monkeypatch, in_sql
):
    """Migration 0010's roll-up of the minutes (one INSERT ... SELECT, or summed here on a
    backend without a half-hour expression) gives the rows the flush adds to as it goes."""
    _flush_a_week(frozen_clock, worker_clock, frozen_clock.now())
    columns = ["half_hour", "job", "queue", "outcome", *stat_columns()]
    flushed = sorted(PassStatHalfHour.objects.values_list(*columns))
    PassStatHalfHour.objects.all().delete()
    if not in_sql:
        monkeypatch.setattr(HalfHourOf, f"as_{connection.vendor}", HalfHourOf.as_sql)
    assert roll_up(PassStat, PassStatHalfHour, "default") == len(flushed) > 100
    assert sorted(PassStatHalfHour.objects.values_list(*columns)) == flushed
