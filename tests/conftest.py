from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest
from django.conf import settings
from django.test import override_settings

from django_leasejobs.clock import FrozenClock, get_clock
from tests import watchdog

_watchdog = pytest.StashKey[object]()


def pytest_configure(config: pytest.Config) -> None:
    """A pytest that dies leaves no worker behind either (``tests/watchdog.py``)."""
    config.stash[_watchdog] = watchdog.watch()


def pytest_unconfigure(config: pytest.Config) -> None:
    guard = config.stash.get(_watchdog, None)
    if guard is not None:
        guard.stdin.close()  # the watchdog ends what is left, then exits
        guard.wait(timeout=60)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test marked ``elsewhere`` whose condition holds is deselected, not skipped.

    It proves a rule of another database (SQLite keeps text in a number's
    column; only a server has a connection to cut) or Django version, and
    runs in that environment's tox env: here it is not a test at all. So
    a CI run shows no skips, and a real one -- a test that cannot run where
    it should -- stands out.
    """
    kept, elsewhere = [], []
    for item in items:
        _may_use_the_mirror_aliases(item)
        marks = list(item.iter_markers("elsewhere"))
        (elsewhere if any(mark.args[0] for mark in marks) else kept).append(item)
    if elsewhere:
        config.hook.pytest_deselected(items=elsewhere)
        items[:] = kept


def _may_use_the_mirror_aliases(item: pytest.Item) -> None:
    """A database test may use the aliases that mirror ``default`` too (``tests/settings.py``).

    ``direct``, behind a transaction pooler: ``LISTEN_DATABASE`` names it, and a
    worker or listener a test runs in-process opens its LISTEN connection there.
    ``replica``, the read replica ``tests/test_replicas.py`` routes reads to: on
    MariaDB, Django 6.1's ``manage.py check`` asks every alias's server for its
    version. Django refuses an alias the test did not list; a mirror has nothing
    rolled back or flushed on it, and neither is written on by the tests. Not on
    SQLite: its in-memory test database shares one cache between connections, where
    a mirror's read waits on the test's own transaction (``database is locked``).
    """
    marker = item.get_closest_marker("django_db")
    mirrors = [
        name
        for name, db in settings.DATABASES.items()
        if db.get("TEST", {}).get("MIRROR") and not db["ENGINE"].endswith("sqlite3")
    ]
    if marker is None or not mirrors:
        return
    databases = marker.kwargs.get("databases") or ["default"]
    if databases != "__all__":
        databases = [*databases, *(alias for alias in mirrors if alias not in databases)]
    item.add_marker(
        pytest.mark.django_db(*marker.args, **{**marker.kwargs, "databases": databases}),
        append=False,
    )


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup):
    """Through a transaction-pooling PgBouncer, the test database can be dropped at the end.

    Django creates it through the pooler like any database (``CREATE DATABASE``
    is one statement outside a transaction, which a transaction pooler passes
    on), and migrates it there. But the pooler keeps its server connections
    to that database open after the suite's own have closed, and PostgreSQL
    refuses to drop a database anyone is connected to: so before Django
    drops it, those server connections are ended -- on the direct alias,
    since the pooler itself hides them (``tests/settings.py``).

    And whatever the server: a mirror alias's connection (``replica``,
    ``direct``) is its own, which Django's drop does not close -- a run of a
    few PostgreSQL tests ended with "database ... is being accessed by other
    users" -- so this thread's connections are closed first.
    """
    yield
    from django.db import connections

    connections.close_all()
    if "direct" in settings.DATABASES:
        _pooled_connections_ended()


def _pooled_connections_ended() -> None:
    """End every other server connection to the test database, the pooler's included."""
    import psycopg
    from django.db import connections

    direct = settings.DATABASES["direct"]
    name = connections["default"].settings_dict["NAME"]
    connections.close_all()
    with psycopg.connect(
        host=direct["HOST"],
        port=direct["PORT"],
        user=direct["USER"],
        password=direct["PASSWORD"],
        dbname="postgres",
        autocommit=True,
    ) as server:
        server.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()",
            [name],
        )


@pytest.fixture(autouse=True)
def _processes_ended():
    """Every process the test started (``tests/processes.py``) is ended by the test itself.

    Whatever happened: a test that fails before its own ``finally`` -- or has
    none -- leaves no ``rundueJobs --loop`` running after pytest exits.
    """
    from tests.processes import end_started

    yield
    end_started()


@pytest.fixture(autouse=True)
def _package_logger_restored():
    """The ``django_leasejobs`` logger as it was before the test.

    A command run in-process (``call_command("rundueJobs")``) sets the logger's
    level for the whole process, as it should in a worker: left so, a later
    test's ``caplog`` would miss the records below that level, and whether a
    test passed would depend on which ran before it.
    """
    logger = logging.getLogger("django_leasejobs")
    level, handlers = logger.level, list(logger.handlers)
    yield
    logger.setLevel(level)
    logger.handlers[:] = handlers


@pytest.fixture
def frozen_clock():
    """Swap in the documented clock seam (L1): time stands still until moved."""
    # Merged into the settings in force, so a run of the suite with PREPARE on keeps it.
    frozen = "django_leasejobs.clock.FrozenClock"
    leasejobs = {**getattr(settings, "LEASEJOBS", {}), "CLOCK": frozen}
    with override_settings(LEASEJOBS=leasejobs):
        clock = get_clock()
        assert isinstance(clock, FrozenClock)
        clock.set(datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
        yield clock


@pytest.fixture
def define():
    """Register jobs for one test: ``define("name", handler, **options)``; unregistered after."""
    from django_leasejobs import job, registry

    names: list[str] = []

    def register(name, handler, **options):
        names.append(name)
        return job(name, **options)(handler)

    yield register
    for name in names:
        registry.unregister(name)


@pytest.fixture
def drive():
    """Run one drive of the given jobs only (so module-level test jobs stay out of it)."""
    from django_leasejobs import run_due_jobs

    def run(*jobs, **options):
        return run_due_jobs(jobs=[getattr(j, "name", j) for j in jobs] or None, **options)

    return run


@pytest.fixture
def one_pass(define, drive):
    """Define a job, start one run of it, drive once: ``(report, the run as stored after)``."""
    from django_leasejobs import start
    from tests.utils import fresh

    def run(name, handler, **options):
        spec = define(name, handler, **options)
        started = start(spec).run
        report = drive(spec)
        return report, fresh(started)

    return run


@pytest.fixture
def mysql_refuses_year_9999(monkeypatch):
    """On MySQL, read a date in year 9999 as PostgreSQL reads one past it: not at all.

    MariaDB refuses to store what it cannot read back, so there the driver's
    refusal to read a date is played by its converter: the path that contains it
    is the same one a real backend's refusal takes (the admin's unreadable rows).
    """
    from django.db import connection

    if connection.vendor == "mysql":
        convert = connection.ops.convert_datetimefield_value

        def refusing(value, expression, connection_):
            if value is not None and value.year == 9999:
                raise ValueError("year 10000 is out of range")
            return convert(value, expression, connection_)

        monkeypatch.setattr(connection.ops, "convert_datetimefield_value", refusing)


class WorkerClock:
    """The worker's own monotonic clock (``time.monotonic``), moved by the test."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def worker_clock(monkeypatch):
    """Freeze the worker's monotonic clock (lease_left, margins, timeouts) until moved."""
    clock = WorkerClock()
    monkeypatch.setattr("time.monotonic", clock)
    return clock


@pytest.fixture(autouse=True)
def _unpaced():
    """Each test starts with no pass times known, so no drive claims ahead until it has
    seen a job's passes (django_leasejobs.pacing): statement counts stay the test's own."""
    from django_leasejobs.pacing import pace
    from django_leasejobs.stats import aggregate

    pace.forget()
    aggregate.forget()  # and no pass statistics of another test's passes are flushed (O1)
    yield
    pace.forget()
    aggregate.forget()
