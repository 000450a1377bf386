"""F11: a lock on the statistics table stops no pass (SPEC §17, O1).

A real ``rundueJobs --loop`` worker drives runs while another connection holds the
strongest lock there is on ``leasejobs_passstat`` -- PostgreSQL's ``LOCK TABLE ...
IN ACCESS EXCLUSIVE MODE``, MariaDB's ``LOCK TABLES ... WRITE``: what a migration,
a ``CREATE INDEX`` or a ``VACUUM FULL`` takes. Before revision 4 the O1 flush,
on the drive's thread with no lock timeout, waited for the whole lock and the
worker ran 0 passes meanwhile. Now the flush gives up after a short lock timeout
(logged), runs keep completing for longer than ``STATS_EVERY`` under the lock,
and once it is released the next flush writes every pass: none is lost.
"""

from __future__ import annotations

import os
import time

import pytest
from django.db import connection
from django.db.models import Sum

from django_leasejobs import RunStatus, start
from django_leasejobs.conf import conf
from django_leasejobs.models import PassStat, RateState, Run, Schedule, Slot
from tests.faults.stall_jobs import BRIEF
from tests.processes import django_command
from tests.test_concurrency import stop_all
from tests.utils import on_a_server_only, wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.concurrency,
    pytest.mark.faults,
    on_a_server_only,
]

WAIT = 60  # seconds: generous, for a busy machine


def _locked(model=PassStat):
    """Another connection to the test database, holding an exclusive lock on *model*'s
    table (the statistics, by default) until it is closed."""
    settings = connection.settings_dict
    table = model._meta.db_table
    if connection.vendor == "postgresql":
        import psycopg

        other = psycopg.connect(
            host=settings["HOST"] or "127.0.0.1",
            port=settings["PORT"] or 5432,
            user=settings["USER"],
            password=settings["PASSWORD"] or None,
            dbname=settings["NAME"],
        )
        other.execute(f'LOCK TABLE "{table}" IN ACCESS EXCLUSIVE MODE')  # in a transaction
        return other
    import MySQLdb

    other = MySQLdb.connect(
        host=settings["HOST"] or "127.0.0.1",
        port=int(settings["PORT"] or 3306),
        user=settings["USER"],
        password=settings["PASSWORD"] or "",
        database=settings["NAME"],
    )
    other.cursor().execute(f"LOCK TABLES `{table}` WRITE")
    return other


def _counted() -> int:
    return PassStat.objects.filter(job=BRIEF).aggregate(n=Sum("count"))["n"] or 0


def test_f11_runs_complete_while_the_statistics_table_is_locked_and_are_counted_after():
    """Five runs before the lock; then, under the lock, one run after another, each
    driven to done, for longer than ``STATS_EVERY`` (so flushes fall due under it);
    after the release all their passes are in the statistics."""
    worker = django_command("rundueJobs", "--loop", "--interval", "0.05", "--job", BRIEF)
    fleet = [worker]
    started = [start(BRIEF, instance=f"before{n}").run.pk for n in range(5)]
    done = Run.objects.filter(status=RunStatus.DONE, job=BRIEF)
    try:
        wait_for(lambda: done.count() == 5, "five runs done before the lock", WAIT, worker=worker)
        other = _locked()
        try:
            locked_at = time.monotonic()
            under = 0
            while time.monotonic() - locked_at < conf.STATS_EVERY.total_seconds() + 3:
                run = start(BRIEF, instance=f"under{under}").run.pk
                started.append(run)
                finished = done.filter(pk=run)
                wait_for(finished.exists, f"run {under} done under the lock", WAIT, worker=worker)
                under += 1
        finally:
            other.close()  # the lock released (PostgreSQL: rolled back)
        wait_for(lambda: _counted() == len(started), "every pass counted after", WAIT)
    finally:
        reaped = stop_all(fleet)
    (code, _out, err), *_ = reaped
    assert code == 0, err
    assert "Pass statistics not written" in err  # a flush gave up under the lock, and said so


#: The side tables locked below. Not the schedules on MariaDB: InnoDB holds a write
#: lock on a table against every write to the tables its foreign keys point at, and
#: a schedule points at its last run -- so there, a lock on the schedules stops
#: every write on the runs, which no lock timeout of ours can shorten
#: (docs/chaos.md, F11).
SIDE_TABLES = (
    [RateState, Slot]
    if "mysql" in os.environ.get("DATABASE_URL", "")
    else [
        Schedule,
        RateState,
        Slot,
    ]
)


@pytest.mark.parametrize("model", SIDE_TABLES, ids=lambda model: model.__name__)
def test_f11_runs_of_a_job_that_needs_no_side_table_complete_while_one_is_locked(model):
    """The schedules (S1: read by every drive), the rate state and the slots (C1-C3:
    only a limited job's claims and BEGINs need them; the hourly prune deletes
    their idle rows) locked as a migration would lock them: runs of a job with
    no schedule and no limit go on being driven, one after another, under the
    lock (before: the drive's schedules phase or prune waited for it)."""
    worker = django_command("rundueJobs", "--loop", "--interval", "0.05", "--job", BRIEF)
    fleet = [worker]
    done = Run.objects.filter(status=RunStatus.DONE, job=BRIEF)
    try:
        start(BRIEF, instance="before")
        wait_for(lambda: done.count() == 1, "a run done before the lock", WAIT, worker=worker)
        other = _locked(model)
        try:
            for under in range(3):
                run = start(BRIEF, instance=f"under{under}").run.pk
                wait_for(done.filter(pk=run).exists, f"run {under} done under the lock", WAIT)
        finally:
            other.close()
    finally:
        reaped = stop_all(fleet)
    (code, _out, err), *_ = reaped
    assert code == 0, err
