"""F7: long readers cost throughput, never correctness.

While real ``rundueJobs --loop`` workers drain many runs, the test process
holds read transactions open on connections of its own, each re-reading the
runs table inside one snapshot for the whole drain: on PostgreSQL
``REPEATABLE READ`` with its snapshot taken (the MVCC horizon pinned: no
dead row version of the drain can be vacuumed), on MariaDB ``START
TRANSACTION WITH CONSISTENT SNAPSHOT`` (purge held back: every update keeps
its undo), on SQLite a ``BEGIN`` with a read done (the WAL cannot be
checkpointed past it). One reader opens before the runs exist, one mid-drain.

Audit: every run done with exact counters; every pass invoked exactly once on
its first attempt (a claim doubled would invoke one twice, a fenced write
refused would supersede a pass and run it again); every step's side effect
once; and no drive reported a superseded, retried or failed pass, an error or
a warning (an admission miss -- a BEGIN refused -- is one).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from django.db import connections

from django_leasejobs import RunStatus, start
from django_leasejobs.models import Run
from tests.models import Effect
from tests.processes import command_env, end, spawned
from tests.utils import wait_for

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

WALK = "tests.f678.walk"
RUNS, PASSES, STEPS, STEP_SECONDS = 40, 2, 2, 0.01
WORKERS = 2

#: How each backend opens a read transaction whose snapshot stays for its whole life.
SNAPSHOT = {
    "postgresql": ["BEGIN ISOLATION LEVEL REPEATABLE READ"],
    "mysql": [
        "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
        "START TRANSACTION WITH CONSISTENT SNAPSHOT",
    ],
    "sqlite": ["BEGIN DEFERRED"],
}
READ = "SELECT COUNT(*), COALESCE(SUM(LENGTH(counters)), 0) FROM leasejobs_run"


class Reader:
    """A connection of the test's own holding one read snapshot open until :meth:`close`."""

    def __init__(self, alias: str) -> None:
        self.connection = connections.create_connection("default")
        self.connection.ensure_connection()
        self.cursor = self.connection.cursor()
        for statement in SNAPSHOT[self.connection.vendor]:
            self.cursor.execute(statement)
        self.first = self.read()
        self.alias = alias

    def read(self) -> tuple[int, int]:
        self.cursor.execute(READ)
        return tuple(self.cursor.fetchone())

    def still_sees_its_snapshot(self) -> bool:
        """Reading again inside the transaction: the same rows as when it began."""
        return self.read() == self.first

    def close(self) -> None:
        try:
            self.cursor.execute("ROLLBACK")
        finally:
            self.cursor.close()
            self.connection.close()


def worker(folder: Path, n: int, concurrency: int):
    args = ["--loop", "--interval", "0.2", "--concurrency", str(concurrency), "--job", WALK]
    with open(folder / f"w{n}.out", "w") as out, open(folder / f"w{n}.err", "w") as err:
        return spawned(
            subprocess.Popen(
                [sys.executable, "-m", "django", "rundueJobs", *args],
                env=command_env(LEASEJOBS_FAULTS_DIR=str(folder / "log")),
                stdout=out,
                stderr=err,
            )
        )


def reported(text: str) -> Counter[str]:
    """The counts of every drive summary a worker printed, summed."""
    totals: Counter[str] = Counter()
    for name, value in re.findall(r"(\w+)=(\d+)", text):
        totals[name] += int(value)
    return totals


@pytest.mark.parametrize("concurrency", [1, 4])
def test_f7_long_readers_refuse_or_double_nothing(tmp_path, concurrency):
    (tmp_path / "log").mkdir()
    readers = [Reader("before")]
    try:
        walk = {"passes": PASSES, "steps": STEPS, "step_seconds": STEP_SECONDS}
        runs = [start(WALK, walk, instance=f"f7-{n}").run.pk for n in range(RUNS)]
        workers = [worker(tmp_path, n, concurrency) for n in range(WORKERS)]
        done = Run.objects.filter(pk__in=runs, status=RunStatus.DONE)
        wait_for(lambda: done.count() >= RUNS // 4, "a quarter of the runs", worker=workers[0])
        readers.append(Reader("mid-drain"))
        wait_for(lambda: done.count() == RUNS, "every run done", seconds=180, worker=workers[0])
        for reader in readers:  # each held its snapshot across the drain
            assert reader.still_sees_its_snapshot(), reader.alias
        assert readers[0].first[0] < RUNS
    finally:
        for reader in readers:
            reader.close()
    outputs = []
    for n, process in enumerate(workers):
        end(process)
        said = (tmp_path / f"w{n}.err").read_text()
        assert process.returncode == 0, said
        assert "Traceback" not in said, said
        outputs.append((tmp_path / f"w{n}.out").read_text())

    starts = []
    for path in (tmp_path / "log").glob("*.log"):
        starts += [line.split() for line in path.read_text().splitlines() if line[:5] == "start"]
    invoked = Counter((run, cursor, attempt) for _, run, cursor, attempt, *_ in starts)
    assert invoked == {(run, str(n), "1"): 1 for run in runs for n in range(PASSES)}
    for run in Run.objects.filter(pk__in=runs):
        assert run.decoded_counters().value == {"steps": PASSES * STEPS, "passes": PASSES}
    effects = Counter(Effect.objects.filter(run_id__in=runs).values_list("run_id", "name"))
    assert len(effects) == RUNS * PASSES * STEPS
    assert set(effects.values()) == {1}
    totals = reported("\n".join(outputs))
    assert totals["attempted"] == RUNS * PASSES
    for name in ("superseded", "retrying", "failed", "held", "errors", "warnings"):
        assert totals[name] == 0, (name, outputs)
