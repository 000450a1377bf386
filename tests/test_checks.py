"""System checks: one test per id, and one full ``manage.py check``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection

from django_leasejobs import checks


def ids(messages):
    return [message.id for message in messages]


def test_e001_leasejobs_must_be_a_dict(settings):
    settings.LEASEJOBS = [("LEASE", 5)]
    assert ids(checks.check_settings()) == ["leasejobs.E001"]


def test_e002_bad_value_names_key_and_expectation(settings):
    settings.LEASEJOBS = {"LEASE": timedelta(milliseconds=10), "DRIVE_LIMIT": 0}
    messages = checks.check_settings()
    assert ids(messages) == ["leasejobs.E002", "leasejobs.E002"]
    assert "LEASEJOBS['LEASE'] must be a timedelta from 100 ms to ten years" in messages[0].msg
    assert "LEASEJOBS['DRIVE_LIMIT'] must be a positive int" in messages[1].msg


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("SCAN_MAX", -1),
        ("MAX_PASSES", 1.5),
        ("RETENTION", 30),
        ("HAND_RUNS_PER_HOUR", True),
        ("MISSED_GRACE", "5m"),
        ("STALL_AFTER", timedelta(0)),
        ("REDACT_ERRORS", 1),
        ("ERROR_MAX_LENGTH", 0),
        ("CLOCK", "clock"),
    ],
)
def test_e002_each_setting_is_validated(settings, key, value):
    settings.LEASEJOBS = {key: value}
    assert ids(checks.check_settings()) == ["leasejobs.E002"]


def test_w001_unknown_key_suggests_the_close_one(settings):
    settings.LEASEJOBS = {"LEASE_TIME": timedelta(minutes=1)}
    (message,) = checks.check_settings()
    assert message.id == "leasejobs.W001"
    assert "'LEASE'" in message.hint


def test_valid_settings_pass(settings):
    settings.LEASEJOBS = {"LEASE": timedelta(minutes=1), "REDACT_ERRORS": True}
    assert checks.check_settings() == []


def test_e003_clock_that_cannot_be_imported(settings):
    settings.LEASEJOBS = {"CLOCK": "nowhere.Clock"}
    assert ids(checks.check_clock()) == ["leasejobs.E003"]


def test_e003_clock_that_is_not_a_clock(settings):
    settings.LEASEJOBS = {"CLOCK": "datetime.timedelta"}
    assert ids(checks.check_clock()) == ["leasejobs.E003"]


def test_clock_seam_passes(settings):
    settings.LEASEJOBS = {"CLOCK": "django_leasejobs.clock.FrozenClock"}
    assert checks.check_clock() == []


def test_e004_use_tz_is_required(settings):
    settings.USE_TZ = False
    assert ids(checks.check_time_zone()) == ["leasejobs.E004"]
    settings.USE_TZ = True
    assert checks.check_time_zone() == []


def test_w002_sqlite_without_immediate_transactions(settings):
    options = connection.settings_dict.get("OPTIONS", {})
    if connection.vendor == "sqlite":
        assert options["transaction_mode"] == "IMMEDIATE"
        assert checks.check_databases() == []
        original = dict(options)
        options.pop("transaction_mode")
        try:
            assert ids(checks.check_databases()) == ["leasejobs.W002"]
        finally:
            options.clear()
            options.update(original)
    else:
        assert checks.check_databases() == []


def test_e005_listen_database_must_be_an_alias(settings):
    settings.LEASEJOBS = {"LISTEN_DATABASE": "direct"}
    (message,) = checks.check_listen_database()
    assert message.id == "leasejobs.E005"
    assert "'direct' is not in DATABASES" in message.msg
    assert "default" in message.hint


def test_w003_listen_database_that_cannot_listen(settings):
    settings.LEASEJOBS = {"LISTEN_DATABASE": "default"}
    found = ids(checks.check_listen_database())
    assert found == ([] if connection.vendor == "postgresql" else ["leasejobs.W003"])


def test_manage_py_check_is_clean():
    call_command("check", "--fail-level", "WARNING")


@pytest.mark.parametrize("value", [0, -1, "4", True, 1.5])
def test_e002_w5_a_bad_concurrency_setting_is_refused_by_check(settings, value):
    settings.LEASEJOBS = {"CONCURRENCY": value}
    (message,) = checks.check_settings()
    assert message.id == "leasejobs.E002"
    assert f"LEASEJOBS['CONCURRENCY'] must be a positive int, got {value!r}" in message.msg
    with pytest.raises(SystemCheckError, match=r"leasejobs\.E002.*CONCURRENCY"):
        call_command("check")


@pytest.mark.parametrize(
    "token",
    [
        "tökén-0123456789abcdef",  # arrives as latin-1 text: never equal
        " leading-0123456789abcdef",
        "trailing-0123456789abcdef ",
        "tab\tinside-0123456789abcdef",
        "line\nbreak-0123456789abcdef",
        "short",
    ],
    ids=["not-ascii", "leading-space", "trailing-space", "tab", "newline", "short"],
)
def test_e002_s11_a_metrics_token_no_header_carries_unchanged_is_refused_by_check(settings, token):
    settings.LEASEJOBS = {"METRICS_TOKEN": token}
    (message,) = checks.check_settings()
    assert message.id == "leasejobs.E002"
    assert "LEASEJOBS['METRICS_TOKEN'] must be None or a str of at least 16 printable" in (
        message.msg
    )
    with pytest.raises(SystemCheckError, match=r"leasejobs\.E002.*METRICS_TOKEN"):
        call_command("check")


def test_s11_a_metrics_token_of_printable_ascii_passes(settings):
    settings.LEASEJOBS = {"METRICS_TOKEN": "scrape token/0123456789+abcdef=~"}
    assert checks.check_settings() == []
