from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.test import override_settings

from django_leasejobs.clock import FrozenClock, get_clock


@pytest.fixture
def frozen_clock():
    """Swap in the documented clock seam (L1): time stands still until moved."""
    with override_settings(LEASEJOBS={"CLOCK": "django_leasejobs.clock.FrozenClock"}):
        clock = get_clock()
        assert isinstance(clock, FrozenClock)
        clock.set(datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
        yield clock
