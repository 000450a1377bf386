"""Small helpers shared by the tests."""

from __future__ import annotations

import os

import pytest

_CONTROL = ("SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO SAVEPOINT", "BEGIN", "COMMIT")


def statements(captured) -> list[str]:
    """The data statements a ``CaptureQueriesContext`` saw, transaction control left out.

    (MySQL logs a statement that failed as ``None``; it still went to the server.)
    """
    return [
        query["sql"]
        for query in captured.captured_queries
        if not query["sql"].upper().startswith(_CONTROL)
    ]


def fresh(obj):
    """*obj* (a run, a step, a schedule) as the database holds it now."""
    return type(obj).objects.get(pk=obj.pk)


def relations_to(model) -> set[tuple]:
    """The foreign keys other models hold to *model*: ``(model, field name, on_delete)``.

    Hidden ones included: ``Schedule.last_run`` has no reverse accessor
    (``related_name="+"``), yet a delete of the row it points at must handle it.
    """
    return {
        (rel.related_model, rel.field.name, rel.on_delete)
        for rel in model._meta.get_fields(include_hidden=True)
        if rel.auto_created and not rel.concrete
    }


#: The Debian package each program of the ``tools`` tests comes from (.ci/run installs them).
DEBIAN_PACKAGES = {"prometheus": "prometheus", "promtool": "prometheus", "faketime": "faketime"}


def tool(name: str) -> str:
    """The path of the program *name*; a ``tools`` test without it fails, never skips."""
    import shutil

    path = shutil.which(name)
    package = DEBIAN_PACKAGES.get(name, name)
    assert path, f"{name} is not installed: apt-get install {package} (.ci/run installs it)"
    return path


def free_port() -> int:
    """A port no one listens on now (the kernel's pick for port 0)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(condition, what, seconds: float = 60, *, every: float = 0.05, worker=None):
    """Poll *condition* until it is true and return it; fail naming *what* after *seconds*.

    The one way a test waits for something another process or thread does:
    never a fixed sleep and then an assertion (the suite must pass on a busy
    machine), always the condition itself, with a deadline generous enough
    that only a hang reaches it. With a *worker* process (or a list of them),
    fail at once if one exits meanwhile, showing its output. *what* may be a
    function, called for the message on failure (to show what was left).
    """
    import time

    workers = [] if worker is None else worker if isinstance(worker, list | tuple) else [worker]
    deadline = time.monotonic() + seconds
    while not (found := condition()):
        if time.monotonic() >= deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"gave up waiting for {said} after {seconds} s")
        for process in workers:
            assert process.poll() is None, process.communicate()
        time.sleep(every)
    return found


def stop_worker(worker, timeout: float = 60) -> tuple[str, str]:
    """SIGTERM a worker process, wait for it; its output. A worker that fails to stop fails."""
    import signal

    worker.send_signal(signal.SIGTERM)
    out, err = worker.communicate(timeout=timeout)
    assert worker.returncode == 0, err
    return out, err


def at(hour: int, minute: int = 0, day: int = 1):
    """A moment of March 2026, UTC: what the schedule tests set the frozen clock to."""
    from datetime import UTC, datetime

    return datetime(2026, 3, day, hour, minute, tzinfo=UTC)


def nightly(define, name: str):
    """A job scheduled at 03:00 Paris time, its Schedule row made by one drive (S1)."""
    from django_leasejobs import run_due_jobs
    from django_leasejobs.models import Schedule

    define(name, lambda p: p.done(), schedule="0 3 * * *", timezone="Europe/Paris")
    run_due_jobs(jobs=[name])
    return Schedule.objects.get(job=name)


def user_with(*codenames: str, username: str = "operator"):
    """A staff user holding exactly the permissions *codenames* (the admin's access rules)."""
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user


def status(*args: str) -> str:
    """What ``manage.py leasejobs_status <args>`` prints."""
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("leasejobs_status", *args, stdout=out)
    return out.getvalue()


def as_json(*args: str):
    """``leasejobs_status --json <args>``, parsed."""
    import json

    return json.loads(status("--json", *args))


def due_in_queue(queue: str, now, *ages: float, prefix: str = "m") -> None:
    """Runs of ``tests.noop`` in *queue*, one due each of *ages* seconds before *now*
    (a negative age: not yet due), named *prefix* and their number."""
    from datetime import timedelta

    from django_leasejobs import start
    from django_leasejobs.models import Run

    for n, age in enumerate(ages):
        run = start("tests.noop", instance=f"{prefix}{n}", queue=queue).run
        Run.objects.filter(pk=run.pk).update(next_attempt_at=now - timedelta(seconds=age))


def waited_out(slow, after) -> list[str]:
    """The instances of the runs *after* whose logged pass began only once *slow*'s ended.

    Every one of them must have a pass in ``PassLog`` (the handlers' own log).
    """
    from tests.models import PassLog

    slow_pass = PassLog.objects.get(run_id=slow.pk)
    began = dict(
        PassLog.objects.filter(run_id__in=[r.pk for r in after]).values_list("run_id", "started_ns")
    )
    assert len(began) == len(after), f"{len(after) - len(began)} of the runs never began"
    return [run.instance for run in after if began[run.pk] > slow_pass.ended_ns]


def stat_columns() -> list[str]:
    """The columns of a statistics row (O1) that hold numbers: its count, times and buckets."""
    from django_leasejobs.models.observability import BUCKET_FIELDS

    return ["count", "total_seconds", "max_seconds", *BUCKET_FIELDS]


def flushed_stat(
    minute,
    job: str = "t.a",
    queue: str = "q",
    outcome: str = "completed",
    count: int = 1,
    total_seconds: float = 0.0,
    max_seconds: float = 0.0,
    **buckets: int,
):
    """A statistics row written as a flush writes it: to its minute and its half-hour (O1, O4).

    Whatever the figures, malformed ones too (a negative count, an outcome
    outside the vocabulary): added to the rows of the same key, if any.
    Returns the minute's row (``half_hour_row`` finds its half-hour's).
    """
    from django_leasejobs.models import PassStat
    from django_leasejobs.models.observability import BUCKET_FIELDS
    from django_leasejobs.stats import Tally
    from django_leasejobs.store.stats import add_stats

    assert set(buckets) <= set(BUCKET_FIELDS), buckets
    tally = Tally()
    tally.count, tally.total, tally.longest = count, total_seconds, max_seconds
    tally.buckets = [buckets.get(name, 0) for name in BUCKET_FIELDS]
    add_stats([(minute, job, queue, outcome, tally)])
    return PassStat.objects.get(minute=minute, job=job, queue=queue, outcome=outcome)


def half_hour_row(row):
    """The half-hour row a minute's statistics *row* was added to (O1, O4)."""
    from django_leasejobs.models import PassStatHalfHour
    from django_leasejobs.store.stats import half_hour_of

    return PassStatHalfHour.objects.get(
        half_hour=half_hour_of(row.minute), job=row.job, queue=row.queue, outcome=row.outcome
    )


def store_text(row, column: str, text: str = "garbled") -> None:
    """Write *text* into *row*'s number *column*, as a restore or a hand edit can on SQLite.

    SQLite keeps what it cannot read as a number as text, whatever the
    column's type; PostgreSQL and MariaDB refuse it, so a test that calls this
    is marked :data:`on_sqlite_only`.
    """
    from django.db import connection

    assert connection.vendor == "sqlite", "mark the test on_sqlite_only"
    qn = connection.ops.quote_name
    table, name = qn(type(row)._meta.db_table), qn(column)
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET {name} = %s WHERE id = %s", [text, row.pk])
        cursor.execute(f"SELECT typeof({name}) FROM {table} WHERE id = %s", [row.pk])
        assert cursor.fetchone() == ("text",)


def _engine() -> str:
    from django.conf import settings

    return str(settings.DATABASES["default"]["ENGINE"]).rsplit(".", 1)[-1]


#: Only SQLite keeps text in a number's column (a restore, a hand edit): the tests of
#: such rows run in the SQLite environments, where the fault can happen.
on_sqlite_only = pytest.mark.elsewhere(
    _engine() != "sqlite3", reason="only SQLite keeps text in a number's column"
)
#: A worker's wall clock faked by libfaketime fakes SQLite's clock too (it is the worker
#: process's own): the offset O1 measures exists only against a database server.
on_a_server_only = pytest.mark.elsewhere(
    _engine() == "sqlite3",
    reason="SQLite's clock is each process's own: a faked wall clock fakes it too",
)
#: What only a real transaction-pooling PgBouncer between the tests and PostgreSQL can
#: show: the py312-django61-pgbouncer env sets LEASEJOBS_TEST_POOLER (.ci/run starts one).
through_a_pooler_only = pytest.mark.elsewhere(
    os.environ.get("LEASEJOBS_TEST_POOLER") != "pgbouncer",
    reason="needs the transaction-pooling PgBouncer of the pgbouncer env",
)
#: A fault of the network between a worker and its database (F2, F5) needs a network:
#: SQLite is a file in the worker's own process.
over_a_network_only = pytest.mark.elsewhere(
    _engine() == "sqlite3", reason="SQLite has no connection to cut off or slow down"
)
