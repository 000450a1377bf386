from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test.utils import CaptureQueriesContext

from tests.utils import statements


@pytest.mark.django_db
def test_models_and_migrations_agree():
    call_command("makemigrations", "leasejobs", "--check", "--dry-run", verbosity=0)


# -- 0010: the half-hours, built from the minutes (O1, O4) --------------------------------------

BEFORE = [("leasejobs", "0009_step_began_at")]
AFTER = [("leasejobs", "0010_passstathalfhour")]


def _migrate(targets):
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.mark.django_db(transaction=True)
def test_o1_o4_migration_0010_sums_the_readable_minutes_per_half_hour_and_reverses():
    """One INSERT ... SELECT: each readable minute in its half-hour (:00-:29, :30-:59 UTC);
    a malformed minute stays a minute. Reversed, the half-hours go and the minutes stay."""
    from datetime import UTC, datetime

    from django.db import connection

    from django_leasejobs.models import PassStatHalfHour

    noon = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    minute = timedelta(minutes=1)
    try:
        apps = _migrate(BEFORE)
        old = apps.get_model("leasejobs", "PassStat")
        row = {"job": "t.a", "queue": "q", "outcome": "completed"}
        old.objects.create(
            **row, minute=noon, count=2, le_00=2, total_seconds=0.5, max_seconds=0.25
        )
        old.objects.create(
            **row, minute=noon + 29 * minute, count=3, le_07=3, total_seconds=2.25, max_seconds=1.0
        )
        old.objects.create(**row, minute=noon + 30 * minute, count=1, total_seconds=400.0)
        old.objects.create(**row, minute=noon - minute, count=4, le_01=4, total_seconds=0.03125)
        old.objects.create(**{**row, "queue": "q2"}, minute=noon + 5 * minute, count=1, le_13=1)
        old.objects.create(**row, minute=noon + 7 * minute, count=-5)  # unreadable: stays
        old.objects.create(**{**row, "outcome": "exploded"}, minute=noon, count=9)  # unreadable
        minutes = old.objects.count()

        with CaptureQueriesContext(connection) as captured:
            _migrate(AFTER)
        into = re.compile(r"^INSERT INTO [`\"]?leasejobs_passstathalfhour[`\"]? \(", re.I)
        inserts = [sql for sql in statements(captured) if into.match(sql)]
        assert len(inserts) == 1  # one INSERT ... SELECT, whatever the minutes
        assert " SELECT " in inserts[0]
        built = {
            (h.half_hour, h.queue, h.outcome): (h.count, h.total_seconds, h.max_seconds, h.buckets)
            for h in PassStatHalfHour.objects.all()
        }
        inf = [0] * 14
        assert built == {
            (noon, "q", "completed"): (5, 2.75, 1.0, [2, 0, 0, 0, 0, 0, 0, 3, *inf[8:], 0]),
            (noon + 30 * minute, "q", "completed"): (1, 400.0, 0.0, [*inf, 1]),
            (noon - 30 * minute, "q", "completed"): (4, 0.03125, 0.0, [0, 4, *inf[2:], 0]),
            (noon, "q2", "completed"): (1, 0.0, 0.0, [*inf[:13], 1, 0]),
        }

        _migrate(BEFORE)
        assert "leasejobs_passstathalfhour" not in connection.introspection.table_names()
        assert apps.get_model("leasejobs", "PassStat").objects.count() == minutes
    finally:
        from django.db.migrations.executor import MigrationExecutor

        _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes("leasejobs"))
