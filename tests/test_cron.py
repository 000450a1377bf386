"""Due times (cron.py): DST in Europe/Paris, and counting long outages without listing them."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from django_leasejobs import cron

PARIS = ZoneInfo("Europe/Paris")


def utc(*args):
    return datetime(*args, tzinfo=UTC)


def take(expression, zone, after, n):
    return list(itertools.islice(cron.iter_due(expression, zone, after), n))


def test_dst_march_0200_runs_once_at_0300_cest_on_the_change_day():
    # 2026-03-29: clocks go from 02:00 CET to 03:00 CEST; 02:00 does not exist.
    times = take("0 2 * * *", PARIS, utc(2026, 3, 27, 12), 4)
    assert times == [
        utc(2026, 3, 28, 1),  # 02:00 CET
        utc(2026, 3, 29, 1),  # 03:00 CEST: the skipped 02:00, moved past the gap
        utc(2026, 3, 30, 0),  # 02:00 CEST
        utc(2026, 3, 31, 0),
    ]


def test_dst_october_0200_runs_once_on_the_change_day():
    # 2026-10-25: clocks go from 03:00 CEST back to 02:00 CET; 02:00 happens twice.
    times = take("0 2 * * *", PARIS, utc(2026, 10, 23, 12), 4)
    assert times == [
        utc(2026, 10, 24, 0),  # 02:00 CEST
        utc(2026, 10, 25, 0),  # 02:00 CEST, the first 02:00; the repeat (01:00 UTC) is dropped
        utc(2026, 10, 26, 1),  # 02:00 CET
        utc(2026, 10, 27, 1),
    ]


def test_dst_october_half_hourly_runs_in_both_copies_of_the_repeated_hour():
    times = take("*/30 * * * *", PARIS, utc(2026, 10, 24, 23, 40), 6)
    assert times == [
        utc(2026, 10, 25, 0, 0),  # 02:00 CEST
        utc(2026, 10, 25, 0, 30),  # 02:30 CEST
        utc(2026, 10, 25, 1, 0),  # 02:00 CET
        utc(2026, 10, 25, 1, 30),  # 02:30 CET
        utc(2026, 10, 25, 2, 0),  # 03:00 CET
        utc(2026, 10, 25, 2, 30),
    ]


def test_dst_next_due_from_the_first_copy_skips_the_repeat():
    assert cron.next_due("0 2 * * *", PARIS, utc(2026, 10, 25, 0)) == utc(2026, 10, 26, 1)


@pytest.mark.parametrize(
    "expression",
    ["0 2 * * *", "30 2 * * *", "*/7 9-17 * * 1-5", "0 0 1,15 * 0", "15 */2 * * *", "@hourly"],
)
def test_count_matches_walking_over_a_year_across_both_dst_changes(expression):
    first, until = utc(2025, 11, 29, 10, 17), utc(2026, 11, 29, 10, 3)
    assert cron.count(expression, PARIS, first, until) == cron._count_by_walking(
        expression, PARIS, first, until
    )


def test_count_of_a_minutely_year_is_exact():
    # 365 days of minutes from 10:17 to 10:03 inclusive; the spring gap and the
    # autumn repeat (kept: minutes differ within it) cancel out.
    first, until = utc(2025, 11, 29, 10, 17), utc(2026, 11, 29, 10, 3)
    assert cron.count("* * * * *", PARIS, first, until) == 365 * 1440 - 14 + 1


def test_newest_keeps_the_newest_and_counts_the_rest():
    first, until = utc(2026, 1, 1), utc(2026, 1, 2)
    kept, older = cron.newest("* * * * *", ZoneInfo("UTC"), first, until, 1000)
    assert len(kept) == 1000
    assert kept[-1] == until
    assert kept[0] == until - timedelta(minutes=999)
    assert older == 1441 - 1000


def test_oldest_says_whether_more_remain():
    zone = ZoneInfo("UTC")
    times, more = cron.oldest("0 * * * *", zone, utc(2026, 1, 1), utc(2026, 1, 1, 5), 3)
    assert times == [utc(2026, 1, 1, h) for h in range(3)]
    assert more
    times, more = cron.oldest("0 * * * *", zone, utc(2026, 1, 1), utc(2026, 1, 1, 5), 10)
    assert len(times) == 6
    assert not more
