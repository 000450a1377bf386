"""F8: a database that cannot grow.

SQLite: the database file held at its ``PRAGMA max_page_count`` (set on the
test's connection and, through ``connection_created`` in
``tests/faults/work.py``, on every connection of the worker), filled to the
limit with a blob table the test then empties: freed pages are reused, so
space returns without the file growing. PostgreSQL: the runs table and its
indexes moved to a tablespace on a small tmpfs that a file of the test's
fills to the last byte ("could not extend file": SQLSTATE 53100); space
returns when the file is removed. (MariaDB: see docs/chaos.md, F6-F8 -- no
honest way to fill one InnoDB table at runtime exists here.)

Must hold: ``start()`` and ``start_many()`` raise :class:`DatabaseFull` (a
documented ``OperationalError`` naming the job, no path, no URL) and write
nothing; a worker whose passes' writes are refused reports each in one line
and goes on driving; once space returns every run is done with exact
counters, and no row is half-written or unreadable.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from importlib.util import find_spec
from pathlib import Path

import pytest
from django.db import OperationalError, connection

from django_leasejobs import RunStatus, start, start_many
from django_leasejobs.errors import FULL_NOTE
from django_leasejobs.exceptions import DatabaseFull
from django_leasejobs.models import Run
from tests.models import Effect
from tests.processes import command_env, end, spawned
from tests.utils import _engine, wait_for

#: The real-process tests are marked ``faults`` one by one: the words each backend uses
#: (at the end) are checked in the default run.
real_workers = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

WALK = "tests.f678.walk"
RUNS, PASSES, STEPS, STEP_SECONDS = 12, 2, 2, 0.01
REFUSED = "database is full"

#: ``max_page_count`` is SQLite's; a server's disk is filled another way (below).
on_sqlite = pytest.mark.elsewhere(_engine() != "sqlite3", reason="max_page_count is SQLite's")
on_a_server = pytest.mark.elsewhere(
    _engine() == "sqlite3", reason="a server's disk is a tmpfs of the test's; SQLite's a limit"
)


def worker(folder: Path, concurrency: int, **env: str):
    """A ``--loop`` worker at ``-v 2``: each drive's errors, one line each (D5)."""
    args = ["--loop", "--interval", "0.2", "--concurrency", str(concurrency), "--job", WALK]
    args += ["-v", "2"]
    with open(folder / "w.out", "w") as out, open(folder / "w.err", "w") as err:
        return spawned(
            subprocess.Popen(
                [sys.executable, "-m", "django", "rundueJobs", *args],
                env=command_env(LEASEJOBS_FAULTS_DIR=str(folder / "log"), **env),
                stdout=out,
                stderr=err,
            )
        )


def fill_with_runs() -> int:
    """Start runs of ``tests.noop`` (no worker of the test drives it) until the database
    refuses one: the room left in the runs table's pages is gone. How many it took."""
    for n in range(100_000):
        try:
            start("tests.noop", instance=f"fill-{n}")
        except DatabaseFull:
            return n
    raise AssertionError("the database never filled up")


def fill_steps() -> int:
    """Record steps of a run no worker drives until the database refuses one: the room
    the step ledger's file still had is gone too (InnoDB grows a table's file by whole
    extents ahead of its rows). How many it took."""
    from django.db import DatabaseError

    from django_leasejobs.models import Step

    holder = Run.objects.filter(job="tests.noop").first()  # one of fill_with_runs'
    assert holder is not None
    for n in range(100_000):
        try:
            Step.objects.create(
                run=holder, name=f"fill-{n}", result="null", last_error="x" * 2000,
                recorded_at=holder.started_at,
            )  # fmt: skip
        except DatabaseError:
            return n
    raise AssertionError("the step ledger never filled up")


def refused_starts() -> None:
    """``start()`` and ``start_many()`` on the full database: a clear error, nothing written."""
    fill_with_runs()
    before = Run.objects.count()
    with pytest.raises(DatabaseFull) as refused:
        start(WALK, {"passes": 1, "steps": 0, "step_seconds": 0}, instance="f8-refused")
    message = str(refused.value)
    assert message.startswith(f"Could not start a run of {WALK!r}: the database is full"), message
    assert "/" not in message, message  # no path
    assert "@" not in message, message  # no URL
    assert "\n" not in message
    with pytest.raises(DatabaseFull):
        start_many(WALK, [(f"f8-batch-{n}", {}) for n in range(50)])
    assert Run.objects.count() == before
    assert not Run.objects.filter(instance__startswith="f8-").exists()


def drained_after(folder: Path, worker_process, runs: list[str], free) -> str:
    """Wait for the worker to report a refused write, *free* space, wait for every run
    to be done; the worker's output. The worker drove on throughout."""
    out = folder / "w.out"
    wait_for(lambda: REFUSED in out.read_text(), "a refused write reported", worker=worker_process)
    free()
    done = Run.objects.filter(pk__in=runs, status=RunStatus.DONE)
    wait_for(lambda: done.count() == RUNS, "every run done", seconds=180, worker=worker_process)
    end(worker_process)
    said = (folder / "w.err").read_text()
    assert worker_process.returncode == 0, said
    assert "Traceback" not in said, said
    return out.read_text()


def audit(runs: list[str], output: str) -> None:
    """Every run done with exact counters, every row readable, every step run; each
    refused write reported on one line of its own (F8, D4)."""
    for run in Run.objects.filter(pk__in=runs):
        assert run.status == RunStatus.DONE
        assert run.decoded_payload().value["passes"] == PASSES
        assert run.decoded_counters().value == {"steps": PASSES * STEPS, "passes": PASSES}
        assert run.decoded_cursor().value == PASSES - 1
    steps = set(Effect.objects.filter(run_id__in=runs).values_list("run_id", "name"))
    assert len(steps) == RUNS * PASSES * STEPS
    reports = [line for line in output.splitlines() if REFUSED in line]
    assert reports
    for line in reports:
        assert line.startswith("  error "), line
        assert line.endswith(FULL_NOTE), line  # one line: the note, no driver text or path


@pytest.mark.parametrize("concurrency", [1, 4])
@on_sqlite
@real_workers[0]
@real_workers[1]
def test_f8_sqlite_at_its_max_page_count(tmp_path, concurrency):
    (tmp_path / "log").mkdir()
    walk = {"passes": PASSES, "steps": STEPS, "step_seconds": STEP_SECONDS}
    runs = [start(WALK, walk, instance=f"run-{n}").run.pk for n in range(RUNS)]
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE f8_filler (b BLOB)")
        cursor.execute("PRAGMA page_count")
        (pages,) = cursor.fetchone()
        limit = pages + 4
        cursor.execute(f"PRAGMA max_page_count = {limit}")
        refused = None
        while refused is None:
            try:
                cursor.execute("INSERT INTO f8_filler VALUES (zeroblob(2000))")
            except OperationalError as exc:
                refused = exc
        assert "database or disk is full" in str(refused)
    try:
        refused_starts()
        process = worker(tmp_path, concurrency, LEASEJOBS_FAULTS_MAX_PAGES=str(limit))

        def free() -> None:
            with connection.cursor() as cursor:
                cursor.execute("DELETE FROM f8_filler")

        output = drained_after(tmp_path, process, runs, free)
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA integrity_check")
            assert cursor.fetchall() == [("ok",)]
            cursor.execute("PRAGMA page_count")
            assert cursor.fetchone()[0] <= limit  # it never grew past the limit
        audit(runs, output)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS f8_filler")
            cursor.execute("PRAGMA max_page_count = 1073741823")


#: The user each database server runs as: the owner of the small disk it must write to.
SERVER_USER = {"postgresql": "postgres", "mysql": "mysql"}


@contextlib.contextmanager
def small_disk():
    """A 4 MB tmpfs mounted for the test, owned by the database server's user (root, and
    the server on this machine, as ``.ci/run`` has it). Unmounted whatever happens."""
    assert os.geteuid() == 0, "F8 on a server mounts a tmpfs: run it as root (.ci/run does)"
    import pwd

    user = pwd.getpwnam(SERVER_USER[connection.vendor])
    mount = Path(tempfile.mkdtemp(prefix="leasejobs-f8-"))
    options = f"size=4M,uid={user.pw_uid},gid={user.pw_gid},mode=0700"
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        for path in mount.glob("filler*"):
            path.unlink()
        subprocess.run(["umount", str(mount)], check=True)
        mount.rmdir()


#: What a pass writes: the runs (claims, renewals, outcomes) and the step ledger (R5).
TABLES = ("leasejobs_run", "leasejobs_step")


@contextlib.contextmanager
def runs_tables_on(mount: Path):
    """The runs and steps tables (with their indexes) stored on *mount*; put back
    whatever happens.

    PostgreSQL: a tablespace there, each table and index moved to it.
    MariaDB: InnoDB places a table's file only when the table is created
    (``ALTER TABLE ... DATA DIRECTORY`` is ignored), so each empty table is
    created again, the same but for ``DATA DIRECTORY``, with the foreign keys
    that name it left in place (``FOREIGN_KEY_CHECKS = 0`` for the swap).
    """
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            space = f"leasejobs_f8_{os.getpid()}"
            moved = [f"TABLE {table}" for table in TABLES]
            indexes = "SELECT indexname FROM pg_indexes WHERE tablename = ANY(%s)"
            cursor.execute(indexes, [list(TABLES)])
            moved += [f'INDEX "{name}"' for (name,) in cursor.fetchall()]
            cursor.execute(f"CREATE TABLESPACE {space} LOCATION '{mount}'")
            done = []
            try:
                for what in moved:
                    cursor.execute(f"ALTER {what} SET TABLESPACE {space}")
                    done.append(what)
                yield
            finally:
                for path in mount.glob("filler*"):
                    path.unlink()  # room for the tables to move back
                for what in done:
                    cursor.execute(f"ALTER {what} SET TABLESPACE pg_default")
                cursor.execute(f"DROP TABLESPACE {space}")
        else:
            assert connection.vendor == "mysql", connection.vendor
            assert not Run.objects.exists(), "the tables are created again: start empty"
            definitions = {}
            for table in TABLES:
                cursor.execute(f"SHOW CREATE TABLE {table}")
                definitions[table] = cursor.fetchone()[1]

            def create(where: str) -> None:
                cursor.execute("SET FOREIGN_KEY_CHECKS = 0")
                try:
                    for table, definition in definitions.items():
                        cursor.execute(f"DROP TABLE {table}")
                        cursor.execute(definition + where)
                finally:
                    cursor.execute("SET FOREIGN_KEY_CHECKS = 1")

            create(f" DATA DIRECTORY = '{mount}'")
            try:
                yield
            finally:
                create("")  # the rows go with them; the flush after the test empties the rest


def fill(mount: Path) -> Path:
    """Write a file on *mount* until the disk is full; the file."""
    filler = mount / "filler"
    with open(filler, "wb") as out, contextlib.suppress(OSError):
        while True:
            out.write(b"\0" * 8192)
            out.flush()
    return filler


@pytest.mark.parametrize("concurrency", [1, 4])
@on_a_server
@real_workers[0]
@real_workers[1]
def test_f8_a_server_whose_disk_is_full(tmp_path, concurrency):
    """PostgreSQL: "could not extend file" (53100); MariaDB: "The table is full" (1114)."""
    (tmp_path / "log").mkdir()
    walk = {"passes": PASSES, "steps": STEPS, "step_seconds": STEP_SECONDS}
    with small_disk() as mount, runs_tables_on(mount):
        runs = [start(WALK, walk, instance=f"run-{n}").run.pk for n in range(RUNS)]
        filler = fill(mount)
        refused_starts()
        fill_steps()
        process = worker(tmp_path, concurrency)
        output = drained_after(tmp_path, process, runs, filler.unlink)
        audit(runs, output)


# -- what each backend says when it cannot grow (no process, no database) ---------------


def _raised_by_django(driver_error: Exception) -> Exception:
    """*driver_error* as Django raises it (``DatabaseErrorWrapper``): an
    ``OperationalError`` with the driver's arguments, its ``__cause__`` the driver's."""
    wrapped = OperationalError(*driver_error.args)
    wrapped.__cause__ = driver_error
    return wrapped


#: Each driver's own errors are built by that driver, so a driver's cases are collected
#: only where it is installed -- not skipped: the README's SQLite run has no mysqlclient,
#: and each server's tox env (``mariadb``, ``postgres``) installs its own and runs them.
HAS_MYSQLCLIENT = find_spec("MySQLdb") is not None
HAS_PSYCOPG = find_spec("psycopg") is not None
BACKENDS = [
    "sqlite",
    *(["mariadb", "mariadb disk"] if HAS_MYSQLCLIENT else []),
    *(["postgresql"] if HAS_PSYCOPG else []),
]


def _backend_error(backend: str) -> Exception:
    """What *backend*'s driver raises when the database cannot grow."""
    if backend == "sqlite":
        import sqlite3

        return sqlite3.OperationalError("database or disk is full")
    if backend == "postgresql":
        import psycopg

        return psycopg.errors.lookup("53100")(
            'could not extend file "pg_tblspc/1/2/3": No space left on device'
        )
    import MySQLdb

    if backend == "mariadb":
        return MySQLdb.OperationalError(1114, "The table 'leasejobs_run' is full")
    return MySQLdb.OperationalError(1021, "Disk full (/var/lib/mysql/x)")


@pytest.mark.parametrize("backend", BACKENDS)
def test_f8_each_backend_s_full_database_is_recognised(backend):
    """F8, §11: the driver's words become DatabaseFull at a start, and one line of the
    drive's report, never the driver's text (PostgreSQL's names a file)."""
    from django_leasejobs.errors import describe, is_full, refused_when_full

    error = _raised_by_django(_backend_error(backend))
    assert is_full(error)
    assert describe(error) == f"OperationalError: {FULL_NOTE}"
    with pytest.raises(DatabaseFull) as refused, refused_when_full("tests.noop"):
        raise error
    assert isinstance(refused.value, OperationalError)
    assert refused.value.__cause__ is error
    assert refused.value.job == "tests.noop"
    assert "/" not in str(refused.value)


def _not_full(other: Exception) -> None:
    from django_leasejobs.errors import is_full, refused_when_full

    error = _raised_by_django(other)
    assert not is_full(error)
    with pytest.raises(OperationalError) as kept, refused_when_full("tests.noop"):
        raise error
    assert kept.value is error


def test_f8_a_locked_sqlite_database_is_not_a_full_one():
    """A busy SQLite file is not mistaken for a full disk."""
    import sqlite3

    _not_full(sqlite3.OperationalError("database is locked"))


if HAS_MYSQLCLIENT:

    def test_f8_a_deadlock_or_a_lost_connection_is_not_a_full_database():
        """MariaDB's deadlock and "server has gone away" are not mistaken for a full disk."""
        import MySQLdb

        _not_full(MySQLdb.OperationalError(1213, "Deadlock found when trying to get lock"))
        _not_full(MySQLdb.OperationalError(2006, "MySQL server has gone away"))
