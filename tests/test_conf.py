from __future__ import annotations

from datetime import timedelta

import pytest

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


def test_values_are_read_at_access(settings):
    settings.LEASEJOBS = {"DRIVE_LIMIT": 7}
    assert conf.DRIVE_LIMIT == 7
    assert conf.SCAN_MAX == 500
    settings.LEASEJOBS = {"DRIVE_LIMIT": 9}
    assert conf.DRIVE_LIMIT == 9


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="NOPE"):
        _ = conf.NOPE
