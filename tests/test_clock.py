"""L1: one clock, the database's; and the documented seam tests use."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from django_leasejobs.clock import DatabaseClock, FrozenClock, get_clock, plus
from django_leasejobs.models import Run
from tests.factories import RunFactory

pytestmark = pytest.mark.django_db


def test_database_clock_reads_the_database_in_utc():
    now = DatabaseClock().now()
    assert now.tzinfo is not None
    # Same machine, so the two clocks agree far better than this; the bound
    # only catches a time-zone error (hours), not timing.
    assert abs(now - timezone.now()) < timedelta(minutes=30)


def test_database_now_expression_compares_in_sql():
    past = RunFactory(next_attempt_at=timezone.now() - timedelta(hours=2))
    RunFactory(next_attempt_at=timezone.now() + timedelta(hours=2))
    due = Run.objects.due(DatabaseClock().now_expr())
    assert list(due.values_list("pk", flat=True)) == [past.pk]


def test_plus_is_evaluated_by_the_database():
    soon = RunFactory(next_attempt_at=timezone.now() + timedelta(hours=2))
    clock = DatabaseClock()
    assert not Run.objects.due(clock.now_expr()).exists()
    assert Run.objects.due(plus(clock.now_expr(), timedelta(hours=3))).get() == soon


def test_frozen_clock_stands_still_until_moved(frozen_clock):
    start = frozen_clock.now()
    assert get_clock() is frozen_clock
    assert frozen_clock.now() == start
    assert frozen_clock.advance(timedelta(seconds=5)) == start + timedelta(seconds=5)
    run = RunFactory(next_attempt_at=start + timedelta(seconds=10))
    assert not Run.objects.due(frozen_clock.now_expr()).exists()
    frozen_clock.advance(timedelta(seconds=5))
    assert Run.objects.due(frozen_clock.now_expr()).get() == run


def test_frozen_clock_refuses_naive_times():
    with pytest.raises(ValueError, match="aware"):
        FrozenClock().set(datetime(2026, 1, 1))
    assert FrozenClock(datetime(2026, 1, 1, tzinfo=UTC)).now().year == 2026


def test_l1_now_plus_nothing_compares_as_now_in_the_same_statement():
    """L1: a run made due at "now + 0" (a retry with no back-off) is due to a read at once.

    SQLite keeps times as text: "now" must be written in the format Django
    writes every other time (six digits of fraction), or ``now + 0`` -- which
    Django's date arithmetic writes that way -- sorts after ``now`` for the
    rest of the millisecond, and the run is not due yet.
    """
    from django.db.models import F

    from django_leasejobs.clock import DbNow

    RunFactory()
    both = Run.objects.annotate(due=plus(DbNow(), timedelta(0)), now=DbNow())
    assert both.filter(due__lte=F("now")).exists()
    assert both.filter(due__gte=F("now")).exists()
