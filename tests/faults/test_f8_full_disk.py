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

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

WALK = "tests.faults.walk"
RUNS, PASSES, STEPS, STEP_SECONDS = 12, 2, 2, 0.01
REFUSED = "database is full"

#: ``max_page_count`` is SQLite's; a server's disk is filled another way (below).
on_sqlite = pytest.mark.skipif(_engine() != "sqlite3", reason="max_page_count is SQLite's")
on_postgresql = pytest.mark.skipif(
    _engine() != "postgresql", reason="a tablespace on a tmpfs of its own is PostgreSQL's"
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


@contextlib.contextmanager
def runs_on_a_small_disk():
    """The runs table and its indexes on a tablespace of their own, on a 4 MB tmpfs
    mounted for the test (root, and the PostgreSQL server on this machine, as
    ``.ci/run`` has it); yields the mount. Put back and unmounted whatever happens."""
    assert os.geteuid() == 0, "F8 on PostgreSQL mounts a tmpfs: run it as root (.ci/run does)"
    import pwd

    postgres = pwd.getpwnam("postgres")
    mount = Path(tempfile.mkdtemp(prefix="leasejobs-f8-"))
    options = f"size=4M,uid={postgres.pw_uid},gid={postgres.pw_gid},mode=0700"
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)], check=True)
    space = f"leasejobs_f8_{os.getpid()}"
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'leasejobs_run'")
        indexes = [name for (name,) in cursor.fetchall()]
    moved: list[str] = []
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"CREATE TABLESPACE {space} LOCATION '{mount}'")
            cursor.execute(f"ALTER TABLE leasejobs_run SET TABLESPACE {space}")
            moved.append("TABLE leasejobs_run")
            for name in indexes:
                cursor.execute(f'ALTER INDEX "{name}" SET TABLESPACE {space}')
                moved.append(f'INDEX "{name}"')
        yield mount
    finally:
        for path in mount.iterdir() if mount.exists() else []:
            if path.name.startswith("filler"):
                path.unlink()
        with connection.cursor() as cursor:
            for what in moved:
                cursor.execute(f"ALTER {what} SET TABLESPACE pg_default")
            cursor.execute(f"DROP TABLESPACE IF EXISTS {space}")
        subprocess.run(["umount", str(mount)], check=True)
        mount.rmdir()


def fill(mount: Path) -> Path:
    """Write a file on *mount* until the disk is full; the file."""
    filler = mount / "filler"
    with open(filler, "wb") as out, contextlib.suppress(OSError):
        while True:
            out.write(b"\0" * 8192)
            out.flush()
    return filler


@pytest.mark.parametrize("concurrency", [1, 4])
@on_postgresql
def test_f8_postgresql_tablespace_out_of_space(tmp_path, concurrency):
    (tmp_path / "log").mkdir()
    walk = {"passes": PASSES, "steps": STEPS, "step_seconds": STEP_SECONDS}
    runs = [start(WALK, walk, instance=f"run-{n}").run.pk for n in range(RUNS)]
    with runs_on_a_small_disk() as mount:
        filler = fill(mount)
        refused_starts()
        process = worker(tmp_path, concurrency)
        output = drained_after(tmp_path, process, runs, filler.unlink)
    audit(runs, output)
