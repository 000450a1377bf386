"""C5 saturation (SPEC §14): throttling logs nothing; a limit reached for 300 s logs once.

What ``django_leasejobs.saturation`` counts, per process and key.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from django_leasejobs import saturation as saturation_module
from django_leasejobs import (
    start,
)
from tests.limit_helpers import (
    LIMITED,
    QUICK,
    SECOND,
    hold_slots,
)

pytestmark = pytest.mark.django_db


# -- C5 saturation: throttling logs nothing, a limit reached for 300 s logs once ---


@pytest.fixture
def episodes(monkeypatch):
    monkeypatch.setattr(saturation_module, "_episodes", {})


def test_c5_a_limit_refusing_every_pass_for_300_s_logs_one_warning(episodes, worker_clock, caplog):
    refused, began = saturation_module.refused, saturation_module.began

    def warnings():
        return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]

    with caplog.at_level(logging.WARNING, logger="django_leasejobs"):
        refused("j", "acme", "concurrency")
        worker_clock.now += 299
        refused("j", "acme", "concurrency")
        assert warnings() == []
        worker_clock.now += 1
        refused("j", "acme", "concurrency")
        assert len(warnings()) == 1
        assert "job=j key=acme limit=concurrency" in warnings()[0]
        worker_clock.now += 299
        refused("j", "acme", "concurrency")
        assert len(warnings()) == 1  # at most once per 300 s while it stays so
        worker_clock.now += 1
        refused("j", "acme", "concurrency")
        assert len(warnings()) == 2

        began("j", "acme")  # a pass began: the episode is over
        worker_clock.now += 1000
        refused("j", "acme", "concurrency")
        refused("j", "", "rate")  # another key is its own episode
        assert len(warnings()) == 2


def test_c5_throttled_drives_over_300_s_warn_once_per_key(
    episodes, worker_clock, frozen_clock, drive, caplog
):
    hold_slots(LIMITED, 2, until=frozen_clock.now() + timedelta(hours=1))
    start(LIMITED, QUICK, instance="waiting")
    with caplog.at_level(logging.WARNING, logger="django_leasejobs"):
        for _ in range(3):
            assert drive(LIMITED).throttled == 1
            frozen_clock.advance(200 * SECOND)
            worker_clock.now += 200
    saturated = [r for r in caplog.records if "Limit saturated" in r.getMessage()]
    assert len(saturated) == 1
    assert "job=tests.limited key=- limit=concurrency" in saturated[0].getMessage()
