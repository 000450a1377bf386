"""SPEC §12 (revision 2): identifying columns compare byte for byte on every backend.

MariaDB's default collation is case- and accent-insensitive and ignores
trailing spaces; there, before the keys took a binary collation, ``foo``
joined the live run of ``Foo`` and foo's work never ran.
"""

from __future__ import annotations

import pytest
from django.db import connection

from django_leasejobs import start
from django_leasejobs.models import Missed, Run, Schedule, Step
from tests.factories import MissedFactory

pytestmark = pytest.mark.django_db

LOOKALIKES = [("Foo", "foo"), ("a", "a "), ("café", "cafe"), ("straße", "strasse")]


@pytest.mark.parametrize(("one", "other"), LOOKALIKES)
def test_r1_instances_that_differ_only_by_case_accent_or_padding_are_two_keys(one, other):
    first = start("tests.noop", instance=one)
    second = start("tests.noop", instance=other)
    assert not first.joined
    assert not second.joined
    assert first.run.pk != second.run.pk
    assert start("tests.noop", instance=one).run.pk == first.run.pk
    assert Run.objects.filter(instance=other).get().pk == second.run.pk


def test_r6_steps_that_differ_only_by_case_are_two_steps(define, drive):
    def handler(p):
        p.step("A", lambda: "upper")
        p.step("a", lambda: "lower")
        raise RuntimeError("keep the ledger")

    spec = define("t.keys.steps", handler)
    run = start(spec).run
    report = drive(spec)
    assert report.retrying == 1  # not superseded by a colliding step row
    ledger = dict(Step.objects.filter(run=run).values_list("name", "result"))
    assert ledger == {"A": '"upper"', "a": '"lower"'}


def test_s1_jobs_that_differ_only_by_case_have_their_own_schedule_and_ledger(define, drive):
    from datetime import UTC, datetime

    define("t.Keys", lambda p: p.done(), schedule="0 3 * * *", timezone="UTC")
    define("t.keys", lambda p: p.done(), schedule="0 4 * * *", timezone="UTC")
    drive("t.Keys", "t.keys")
    assert set(
        Schedule.objects.filter(job__in=["t.Keys", "t.keys"]).values_list("job", flat=True)
    ) == {
        "t.Keys",
        "t.keys",
    }
    due = datetime(2026, 1, 1, 3, tzinfo=UTC)
    MissedFactory(job="t.Keys", due_at=due)
    MissedFactory(job="t.keys", due_at=due)
    assert Missed.objects.filter(due_at=due).count() == 2


def test_s12_every_identifying_column_has_a_binary_collation_on_mysql():
    """The migration's collation, read back; elsewhere the columns compare exactly already."""
    columns = {
        ("leasejobs_run", "job"),
        ("leasejobs_run", "instance"),
        ("leasejobs_run", "live_key"),
        ("leasejobs_step", "name"),
        ("leasejobs_schedule", "job"),
        ("leasejobs_missed", "job"),
    }
    if connection.vendor != "mysql":
        assert start("tests.noop", instance="X").run.pk != start("tests.noop", instance="x").run.pk
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name, column_name, collation_name FROM information_schema.columns "
            "WHERE table_schema = DATABASE() AND table_name LIKE 'leasejobs_%%'"
        )
        found = {(table, column): collation for table, column, collation in cursor.fetchall()}
    assert {column: found[column] for column in columns} == dict.fromkeys(
        columns, "utf8mb4_nopad_bin" if connection.mysql_is_mariadb else "utf8mb4_0900_bin"
    )
