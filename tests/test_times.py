"""django_leasejobs.times: every time and duration a person reads, written one way (SPEC A8).

The admin, ``leasejobs_status`` and the worker's log lines all call it, so
these cases are what each of them prints.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from django_leasejobs.times import (
    LogFormatter,
    axis_stamp,
    duration,
    iso,
    moment,
    relative,
    zone_name,
    zoned,
)

NOW = datetime(2026, 12, 3, 16, 53, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(0), "0 s"),
        (0.000_5, "0.5 ms"),
        (0.0357, "35.7 ms"),
        (0.85, "850 ms"),
        (1.5, "1.5 s"),
        (9.75, "9.75 s"),
        (timedelta(seconds=3), "3 s"),
        (timedelta(seconds=30), "30 s"),
        (timedelta(seconds=45), "45 s"),
        (timedelta(minutes=2), "2 min"),
        (timedelta(minutes=3, seconds=20), "3 min 20 s"),
        (timedelta(minutes=40, seconds=9), "40 min"),
        (timedelta(hours=1, minutes=5), "1 h 5 min"),
        (timedelta(hours=9, minutes=59), "9 h 59 min"),
        (timedelta(hours=14, minutes=5), "14 h"),
        (timedelta(days=2, hours=4), "2 d 4 h"),
        (timedelta(days=12), "12 d"),
        (-timedelta(seconds=30), "30 s"),
        (30, "30 s"),
    ],
)
def test_a8_a_duration_reads_in_one_unit_style(value, text):
    assert duration(value) == text


@pytest.mark.parametrize(
    ("delta", "text"),
    [
        (timedelta(seconds=45), "45 s"),
        (timedelta(seconds=45, milliseconds=400), "45 s"),
        (timedelta(minutes=3, seconds=20), "3 min 20 s"),
        (timedelta(hours=1, minutes=5), "1 h 5 min"),
    ],
)
def test_a8_relative_times_are_brief_but_exact_enough(delta, text):
    assert relative(NOW + delta, NOW) == f"in {text}"
    assert relative(NOW - delta, NOW) == f"{text} ago"
    assert relative(NOW + timedelta(seconds=1), NOW) == "now"
    assert relative(NOW - timedelta(seconds=1), NOW) == "now"


def test_a8_a_moment_has_its_date_its_time_to_the_second_and_its_zone():
    assert zone_name() == "UTC"  # the test site's TIME_ZONE
    assert moment(NOW) == "2026-12-03 16:53:12 UTC"
    assert moment(NOW, near=NOW + timedelta(hours=3)) == "16:53:12 UTC"  # the same day
    assert moment(NOW, near=NOW + timedelta(hours=8)) == "2026-12-03 16:53:12 UTC"
    assert moment(NOW.replace(tzinfo=None)) == "2026-12-03 16:53:12 UTC"  # naive: UTC (USE_TZ)


@override_settings(TIME_ZONE="Europe/Paris")
def test_a8_a_moment_is_in_the_sites_time_zone_and_names_it():
    assert zone_name() == "Europe/Paris"
    assert moment(NOW) == "2026-12-03 17:53:12 Europe/Paris"
    assert axis_stamp(NOW) == "17:53"
    assert axis_stamp(NOW, weekday=True) == "Thu 17:53"
    assert iso(NOW) == "2026-12-03T16:53:12+00:00"  # what programs read stays UTC


def test_a8_a_moment_follows_a_zone_a_middleware_activated():
    with timezone.override("Asia/Kolkata"):
        assert moment(NOW) == "2026-12-03 22:23:12 Asia/Kolkata"


def test_a8_a_due_time_is_in_the_sites_zone_with_the_schedules_own_beside_it():
    when = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)
    assert zoned(when, "Europe/Paris") == "2026-12-02 02:00:00 UTC (03:00 Europe/Paris)"
    assert zoned(when, "America/New_York") == (
        "2026-12-02 02:00:00 UTC (2026-12-01 21:00 America/New_York)"
    )
    assert zoned(when, "UTC") == "2026-12-02 02:00:00 UTC"  # the site's own: named once
    assert zoned(when, "Mars/Olympus") == "2026-12-02 02:00:00 UTC"  # unknown here


@override_settings(TIME_ZONE="Europe/Paris")
def test_a8_log_lines_name_the_zone_their_time_is_in():
    record = logging.LogRecord("django_leasejobs", logging.INFO, __file__, 1, "hello", (), None)
    record.created = NOW.timestamp()
    line = LogFormatter("%(asctime)s %(levelname)s %(message)s").format(record)
    assert line == "2026-12-03 17:53:12 Europe/Paris INFO hello"


@override_settings(TIME_ZONE="Europe/Paris")
def test_a8_the_commands_log_to_stderr_with_times_that_name_their_zone(monkeypatch):
    """``rundueJobs`` on a site without logging of its own: its lines say their zone."""
    from django_leasejobs.management.base import configure_logging

    package = logging.getLogger("django_leasejobs")
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    monkeypatch.setattr(package, "handlers", [])
    monkeypatch.setattr(package, "level", package.level)
    configure_logging(2)
    (handler,) = package.handlers
    assert isinstance(handler.formatter, LogFormatter)
    record = logging.LogRecord("django_leasejobs", logging.INFO, __file__, 1, "Run", (), None)
    record.created = NOW.timestamp()
    assert handler.format(record) == "2026-12-03 17:53:12 Europe/Paris INFO Run"
