"""SPEC §12: a kick and a finishing commit take their locks in one order, and a
deadlock or serialization failure is retried, never taken for a lost connection.

Proven with real processes against the test database; MariaDB is where the two
writes deadlocked (error 1213) before the kick updated by primary key.
"""

from __future__ import annotations

import pytest
from django.db import DatabaseError, OperationalError

from django_leasejobs import RunStatus, cancel
from django_leasejobs.errors import connection_lost, is_conflict
from django_leasejobs.models import Run
from tests.processes import run_together

PROCESSES = 4
SECONDS = 8.0


@pytest.mark.django_db(transaction=True)
@pytest.mark.concurrency
def test_s12_kicks_racing_finishing_commits_never_deadlock_or_abort_a_drive():
    instances = [f"k{n}" for n in range(3)]
    results = run_together(
        "tests.processes.kick_and_drive", PROCESSES, "tests.noop", instances, SECONDS
    )
    assert [problems for problems in results if any(problems.values())] == []
    assert Run.objects.filter(job="tests.noop", status=RunStatus.DONE).count() > PROCESSES


class Deadlock(Exception):
    """What a driver raises for a lost race: MySQLdb's args, psycopg's sqlstate."""

    args = (1213, "Deadlock found when trying to get lock; try restarting transaction")
    sqlstate = "40P01"


def deadlock() -> OperationalError:
    error = OperationalError(*Deadlock.args)
    error.__cause__ = Deadlock()
    return error


@pytest.mark.django_db(transaction=True)
def test_s12_a_write_that_loses_a_deadlock_is_run_again(monkeypatch):
    from django_leasejobs import start

    run = start("tests.noop").run
    update = type(Run.objects.all()).update
    failures = iter([deadlock(), deadlock()])

    def racing(queryset, **values):
        error = next(failures, None)
        if error is not None:
            raise error
        return update(queryset, **values)

    monkeypatch.setattr(type(Run.objects.all()), "update", racing)
    assert cancel(run.pk)  # two deadlocks, then the third attempt wins
    assert Run.objects.get(pk=run.pk).status == RunStatus.CANCELLED


def test_s12_a_deadlock_is_a_conflict_and_not_a_lost_connection(db):
    assert is_conflict(deadlock())
    assert not is_conflict(DatabaseError("some other error"))
    assert not connection_lost("default")
