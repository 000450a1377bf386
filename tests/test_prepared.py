"""``PREPARE`` (§13): a start's and a pass's fixed statements, prepared once per connection.

On PostgreSQL with psycopg 3 they go through a server-binding cursor that
prepares them; the site's own queries stay client-side and unprepared. On
SQLite and MariaDB the setting changes nothing. The whole suite also runs
with it on (``LEASEJOBS_TEST_PREPARE=1``, see ``tests/settings.py``).
"""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_leasejobs import RunStatus, start, start_many
from django_leasejobs.models import Run
from django_leasejobs.store.sql import prepared
from tests.utils import fresh, statements

pytestmark = pytest.mark.django_db


def _prepared_statements() -> list[str]:
    """What this session holds prepared (PostgreSQL's own view of it)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [statement for (statement,) in cursor.fetchall()]


def _steps(p):
    total = p.step("one", lambda: 1) + p.step("two", lambda: 2)
    p.count("total", total)
    return p.done()


def test_s13_prepare_runs_starts_and_passes_as_they_run_unprepared(settings, define, drive):
    settings.LEASEJOBS = {"PREPARE": True}
    spec = define("t.prepared.steps", _steps)
    runs = [start(spec, {"n": n}, instance=f"p{n}").run for n in range(3)]
    runs += [r.run for r in start_many(spec, [("m1", [1]), ("m2", [2])])]
    joined = start(spec, {"n": 9}, instance="p0")
    assert joined.joined
    assert joined.run.pk == runs[0].pk
    report = drive(spec)
    assert report.completed == 5
    for run in runs:
        after = fresh(run)
        assert after.status == RunStatus.DONE
        assert json.loads(after.counters) == {"total": 3}
        assert after.live_key is None


def test_s13_prepare_prepares_our_statements_and_none_of_the_sites(settings, define, drive):
    if not prepared.prepares(connection):
        settings.LEASEJOBS = {"PREPARE": True}
    if connection.vendor != "postgresql":
        assert not prepared.prepares(connection)  # SQLite, MariaDB: nothing to prepare
        return
    settings.LEASEJOBS = {"PREPARE": False}
    spec = define("t.prepared.off", _steps)
    start(spec, instance="before")
    drive(spec)
    ours = [s for s in _prepared_statements() if "leasejobs_run" in s]
    assert ours == [] or prepared.prepares(connection)
    settings.LEASEJOBS = {"PREPARE": True}
    assert prepared.prepares(connection)
    for n in range(3):
        start(spec, instance=f"on{n}")
    drive(spec)
    for _ in range(6):
        assert Run.objects.filter(instance__startswith="on").count() == 3
    statements = _prepared_statements()
    assert any(s.startswith('INSERT INTO "leasejobs_run"') for s in statements), statements
    assert any(s.startswith('UPDATE "leasejobs_run"') for s in statements), statements
    # The site's own query, sent six times, stays Django's: client-side, never prepared.
    assert not [s for s in statements if "COUNT(*)" in s], statements


def test_s13_prepare_sends_the_same_statements_in_the_same_number(settings, define, drive):
    """The budget of §13 holds prepared: preparing changes how a statement travels, not which."""
    spec = define("t.prepared.budget", _steps)
    drive(spec)  # the process's first drive also syncs schedules: not what is compared
    sent = {}
    for prepare in (False, True):
        settings.LEASEJOBS = {"PREPARE": prepare}
        with CaptureQueriesContext(connection) as captured:
            start(spec, instance=f"b{prepare}")
            assert drive(spec).completed == 1
        sent[prepare] = [_verb(sql) for sql in statements(captured)]
    assert sent[True] == sent[False]
    assert "UPDATE" in sent[True]  # the pass's compare-and-set statements were counted


def _verb(sql: str) -> str:
    """A statement's first word: its owners and times differ from run to run."""
    return sql.split(" ", maxsplit=1)[0]


# -- PREPARE = None, the default: where it is safe -------------------------------------------


@pytest.fixture
def automatic(settings):
    """``PREPARE`` left at its default, and no alias remembered as pooled after the test."""
    settings.LEASEJOBS = {}
    yield
    prepared._LOST.clear()


@pytest.mark.django_db(transaction=True)
def test_s13_by_default_ours_are_prepared_outside_a_transaction_and_never_inside(automatic):
    if connection.vendor != "postgresql":
        assert not prepared.prepares(connection)
        return
    connection.ensure_connection()
    assert prepared.prepares(connection)
    start("tests.noop", instance="outside")
    assert any(s.startswith('INSERT INTO "leasejobs_run"') for s in _prepared_statements())
    from django.db import transaction

    with transaction.atomic():
        # The caller's transaction: a statement a pooler lost would spoil it.
        assert not prepared.prepares(connection)
        start("tests.noop", instance="inside")
    assert Run.objects.filter(instance__in=["outside", "inside"]).count() == 2


@pytest.mark.django_db(transaction=True)
def test_s13_by_default_an_alias_marked_for_a_pooler_is_not_prepared(automatic, monkeypatch):
    if connection.vendor != "postgresql":
        return
    connection.ensure_connection()
    monkeypatch.setitem(connection.settings_dict, "DISABLE_SERVER_SIDE_CURSORS", True)
    assert not prepared.prepares(connection)
    start("tests.noop", instance="pooled")
    assert not [s for s in _prepared_statements() if "leasejobs_run" in s]


@pytest.mark.django_db(transaction=True)
def test_s13_a_statement_a_pooler_lost_is_sent_again_unprepared_and_preparing_stops(
    automatic, caplog
):
    """What a transaction-pooling PgBouncer before 1.21 does, played by the server itself:
    the statement psycopg prepared is gone (``DEALLOCATE ALL`` on Django's own cursor,
    which psycopg does not watch), so its next EXECUTE fails. Nothing ran: the start goes
    through unprepared, once, and the alias is never prepared again in this process."""
    if connection.vendor != "postgresql":
        return
    start("tests.noop", instance="first")  # the insert, prepared
    assert any(s.startswith('INSERT INTO "leasejobs_run"') for s in _prepared_statements())
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
    with caplog.at_level("WARNING", logger="django_leasejobs"):
        second = start("tests.noop", instance="second")
        third = start("tests.noop", instance="third")
    assert not second.joined
    assert not third.joined
    assert Run.objects.filter(instance__in=["first", "second", "third"]).count() == 3
    warned = [r.getMessage() for r in caplog.records if "Prepared statements" in r.getMessage()]
    assert len(warned) == 1, warned
    assert "'default'" in warned[0]
    assert "PREPARE" in warned[0]
    assert not prepared.prepares(connection)
    assert not [s for s in _prepared_statements() if "leasejobs_run" in s]


@pytest.mark.django_db(transaction=True)
def test_s13_with_prepare_true_a_lost_statement_is_the_callers_error(settings):
    """``True`` is the site's word that nothing between loses them: no second guess."""
    if connection.vendor != "postgresql":
        return
    from django.db import ProgrammingError

    settings.LEASEJOBS = {"PREPARE": True}
    start("tests.noop", instance="first")
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
    with pytest.raises(ProgrammingError, match="does not exist"):
        start("tests.noop", instance="second")
    assert not Run.objects.filter(instance="second").exists()
