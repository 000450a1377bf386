from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings

from django_leasejobs.conf import SPECS, conf


def test_defaults_when_unset(settings):
    del settings.LEASEJOBS
    assert conf.LEASE == timedelta(minutes=5)
    assert conf.DRIVE_LIMIT == 50
    assert conf.SCAN_MAX == 500
    assert conf.MAX_PASSES == 1
    assert conf.RETENTION == timedelta(days=30)
    assert conf.HAND_RUNS_PER_HOUR == 20
    assert conf.MISSED_GRACE == timedelta(minutes=5)
    assert conf.STALL_AFTER == timedelta(minutes=15)
    assert conf.REDACT_ERRORS is False
    assert conf.ERROR_MAX_LENGTH == 2000
    assert conf.CLOCK == "django_leasejobs.clock.DatabaseClock"


def test_every_default_is_valid():
    for name, spec in SPECS.items():
        assert spec.valid(spec.default), name


def test_values_are_kept_until_the_settings_change(settings):
    """Read once, then kept: a change through override_settings drops what was kept."""
    settings.LEASEJOBS = {"DRIVE_LIMIT": 7}
    assert conf.DRIVE_LIMIT == 7
    assert conf.SCAN_MAX == 500
    assert "DRIVE_LIMIT" in vars(conf)  # kept: the next read is a plain attribute
    settings.LEASEJOBS = {"DRIVE_LIMIT": 9}
    assert "DRIVE_LIMIT" not in vars(conf)
    assert conf.DRIVE_LIMIT == 9
    with override_settings(LEASEJOBS={"DRIVE_LIMIT": 11}):
        assert conf.DRIVE_LIMIT == 11
    assert conf.DRIVE_LIMIT == 9


def test_another_settings_change_keeps_what_was_read(settings):
    settings.LEASEJOBS = {"DRIVE_LIMIT": 7}
    assert conf.DRIVE_LIMIT == 7
    settings.TIME_ZONE = "Europe/Paris"
    assert "DRIVE_LIMIT" in vars(conf)


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="NOPE"):
        _ = conf.NOPE
