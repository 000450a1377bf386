"""§12 poolers: through a real transaction-pooling PgBouncer, ``PREPARE = None`` falls back.

PgBouncer 1.18 (Debian bookworm's) in transaction mode hands each
transaction -- each statement, in autocommit -- to whichever server
connection is free, and knows nothing of prepared statements: one prepared
on one server connection is unknown to the next. ``PREPARE`` left at its
default must notice the first one lost, send that statement again
unprepared, and prepare nothing more on the alias (W2, §13,
``django_leasejobs/store/sql/prepared.py``). ``tests/test_prepared.py``
plays the pooler with ``DEALLOCATE ALL``; here the pooler is real.

These tests run only in the ``py312-django61-pgbouncer`` env, which ``.ci/run``
points at the PgBouncer it starts (``.ci/pgbouncer``); elsewhere they are
deselected, not skipped.
"""

from __future__ import annotations

import json
import logging

import psycopg
import pytest
from django.db import connection

from django_leasejobs import RunStatus, start
from django_leasejobs.models import Run
from django_leasejobs.store.sql import prepared
from tests.models import Effect
from tests.processes import django_command
from tests.utils import through_a_pooler_only

pytestmark = [pytest.mark.django_db(transaction=True), through_a_pooler_only]

WAIT = 120  # seconds: only a hang waits this long


@pytest.fixture
def automatic(settings):
    """``PREPARE`` at its default, this process's connection new, no alias remembered lost."""
    settings.LEASEJOBS = {k: v for k, v in settings.LEASEJOBS.items() if k != "PREPARE"}
    lost = set(prepared._LOST)
    prepared._LOST.clear()
    connection.close()  # a psycopg connection that has prepared nothing yet
    yield
    prepared._LOST.clear()
    prepared._LOST.update(lost)


def _through_the_pooler() -> psycopg.Connection:
    """Another client of the pooler, on the test database: a plain psycopg connection."""
    db = connection.settings_dict
    return psycopg.connect(
        host=db["HOST"], port=db["PORT"], user=db["USER"], password=db["PASSWORD"],
        dbname=db["NAME"], autocommit=True,
    )  # fmt: skip


def _has_our_insert(client: psycopg.Connection) -> bool:
    rows = client.execute("SELECT statement FROM pg_prepared_statements").fetchall()
    return any(statement.startswith('INSERT INTO "leasejobs_run"') for (statement,) in rows)


def test_s12_through_pgbouncer_a_lost_prepared_statement_turns_preparing_off(
    automatic, caplog, drive
):
    """The next start lands on another server connection than the one that prepared its
    insert -- one where another client prepared a statement of its own, under the name
    psycopg gives every connection's first (``_pg3_0``): ours is unknown there, never
    bound to theirs. It is sent again unprepared, with one warning, and the alias is no
    longer prepared; the runs started either side are driven to the end like any others.
    """
    assert prepared.prepares(connection)
    with caplog.at_level(logging.WARNING, logger="django_leasejobs"):
        first = start("tests.noop", instance="first").run  # prepared where it ran
        # The pooler hands out its server connections last in, first out: a client
        # that opens a transaction now is given the one the insert was prepared on,
        # and keeps it until it commits.
        holder = _through_the_pooler()
        intruder = _through_the_pooler()
        try:
            holder.execute("BEGIN")
            if _has_our_insert(holder):
                # The next server connection out: another client prepares its first
                # statement there, and gives it back; our next start is handed it.
                intruder.execute("SELECT %s::int", [1], prepare=True)
                assert intruder.execute(
                    "SELECT count(*) FROM pg_prepared_statements WHERE name = '_pg3_0'"
                ).fetchone() == (1,)
            # else the insert's own two round trips (prepare, then execute) already met
            # two server connections: the fallback is behind us.
            second = start("tests.noop", instance="second").run
            holder.execute("COMMIT")
        finally:
            holder.close()
            intruder.close()
        third = start("tests.noop", instance="third").run
    warned = [r.getMessage() for r in caplog.records if "Prepared statements" in r.getMessage()]
    assert len(warned) == 1, warned
    assert "'default'" in warned[0]
    assert not prepared.prepares(connection)
    assert drive("tests.noop").completed == 3
    for run in (first, second, third):
        assert Run.objects.get(pk=run.pk).status == RunStatus.DONE


def test_s12_through_pgbouncer_workers_with_prepare_left_on_its_default_finish_every_pass(
    automatic,
):
    """Three workers of four pass threads, more clients than the pooler has server
    connections (8): every pass of every run completes and no step runs twice, whether a
    worker's statements met their prepared copies again or fell back."""
    runs = [
        start("tests.counted_walk", {"passes": 3, "steps": 2}, instance=f"w{n}").run
        for n in range(24)
    ]
    args = ["rundueJobs", "--concurrency", "4", "--max-seconds", "600", "--json"]
    workers = [django_command(*args, "--job", "tests.counted_walk") for _ in range(3)]
    outputs = []
    for worker in workers:
        out, err = worker.communicate(timeout=WAIT)
        assert worker.returncode == 0, err
        outputs.append((out, err))
    reports = [json.loads(out.splitlines()[-1]) for out, _err in outputs]
    assert sum(report["failed"] for report in reports) == 0, outputs
    assert Run.objects.filter(pk__in=[r.pk for r in runs], status=RunStatus.DONE).count() == 24
    effects = Effect.objects.filter(run_id__in=[r.pk for r in runs])
    names = list(effects.values_list("run_id", "name"))
    assert len(names) == len(set(names)) == 24 * 3 * 2
    fell_back = sum("Prepared statements do not survive" in err for _out, err in outputs)
    print(f"workers that fell back from PREPARE: {fell_back} of {len(workers)}")
