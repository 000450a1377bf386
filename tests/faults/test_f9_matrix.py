"""F9: the fault matrix -- every class of fault, over and over, then the §17 invariants.

For each fault class a round starts three workers (``--concurrency`` 1, 4 and 1),
each behind a :class:`~tests.faults.proxy.FaultProxy` of its own, keeps a backlog of
runs of tests/faults/jobs.py's ``walk`` in front of them, and does the fault to a
worker picked at random, ``LEASEJOBS_MATRIX_FAULTS`` times (3 by default: the
short round CI runs). Then the faults stop, every run is driven to its end, the
workers are stopped, and the round is audited (tests/faults/audit.py): no run
lost, never two passes of one run at once, counters exactly what the committed
passes wrote, and a step repeated only when it was in flight at a fault.

The long run that docs/chaos.md publishes (F9)::

    DATABASE_URL=postgres://root@127.0.0.1:5432/test LEASEJOBS_MATRIX_FAULTS=100 \\
        pytest -m faults -s tests/faults/test_f9_matrix.py

prints, per database and class: faults injected, runs, passes, duplicates (step
bodies that ran twice), stale writes refused (passes ended ``LeaseLost``: a
write after their lease was gone, refused by the fence, L6), lost and
overlapping passes (both must be 0). ``LEASEJOBS_MATRIX_REPORT=<file>`` also
appends the table's rows to a file; ``LEASEJOBS_MATRIX_CLASSES=paused,slow`` plays
only the classes named (comma-separated, as the table names them).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.db import connection

from django_leasejobs import start
from tests.faults import audit
from tests.faults.clock import faked_clock_env
from tests.faults.fleet import Fleet, Worker, pause, resume
from tests.faults.jobs import LEASE, WALK
from tests.faults.proxy import FaultProxy
from tests.models import Effect
from tests.utils import over_a_network_only, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.faults, over_a_network_only]

FAULTS = int(os.environ.get("LEASEJOBS_MATRIX_FAULTS", "3"))
PASSES, STEPS, STEP_SECONDS = 3, 2, 0.2
PAYLOAD = {"passes": PASSES, "steps": STEPS, "step_seconds": STEP_SECONDS}
CONCURRENCY = (1, 4, 1)
BACKLOG = 12  # runs kept due or running while the faults go on
PAST_THE_LEASE = LEASE.total_seconds() + 0.5


@dataclass
class Round:
    """One class's round: its workers, each one's proxy and faked clock, and what it saw."""

    name: str
    log_dir: Path
    fleet: Fleet
    proxies: dict[int, FaultProxy] = field(default_factory=dict)
    clocks: dict[int, Path] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)
    faults: int = 0
    concurrency: dict[int, int] = field(default_factory=dict)

    def start_worker(self, concurrency: int) -> Worker:
        proxy = FaultProxy(connection.vendor).start()
        clock = self.log_dir / f"clock-{len(self.fleet.workers)}"
        clock.write_text("+0\n")
        self.fleet.concurrency = concurrency
        # Only the clock round moves a wall clock (F6); the others leave it alone.
        env = faked_clock_env(clock) if self.name == "clock jumped" else {}
        worker = self.fleet.start(port=proxy.port, env=env)
        self.proxies[worker.pid] = proxy
        self.clocks[worker.pid] = clock
        self.concurrency[worker.pid] = concurrency
        return worker

    def live(self) -> list[Worker]:
        return [worker for worker in self.fleet.workers if worker.process.poll() is None]

    def stop(self) -> None:
        self.fleet.stop()
        for proxy in self.proxies.values():
            proxy.stop()


def noted(worker: Worker) -> None:
    """A fault instant of *worker*, for the audit (its passes open now were in flight)."""
    worker.faults.append(time.monotonic_ns())


# -- the faults: each does one to *worker* and leaves it able to work again ----------------


def paused(round_: Round, worker: Worker) -> None:
    """F1: SIGSTOP past the lease, then SIGCONT."""
    pause(worker)
    time.sleep(PAST_THE_LEASE)  # the fault's length is the point: longer than the lease
    resume(worker)


def killed(round_: Round, worker: Worker) -> None:
    """The chaos test's SIGKILL, and a replacement with the same concurrency."""
    noted(worker)
    worker.process.kill()
    worker.process.wait()
    round_.start_worker(round_.concurrency[worker.pid])


def cut_off(round_: Round, worker: Worker) -> None:
    """F2: every packet dropped, silently, past the lease; then the network heals."""
    proxy = round_.proxies[worker.pid]
    noted(worker)
    proxy.blackhole()
    time.sleep(PAST_THE_LEASE)  # the fault's length is the point: longer than the lease
    proxy.heal()


def reply_lost(round_: Round, worker: Worker) -> None:
    """F3: the next COMMIT the worker sends is applied, and its reply never arrives."""
    proxy = round_.proxies[worker.pid]
    cuts = proxy.cuts
    noted(worker)
    # The COMMIT statement itself, not any statement that says "commit" (MariaDB's
    # "SET autocommit=0" opens every transaction): PostgreSQL's Query ends with the
    # statement's NUL, a MariaDB COM_QUERY starts with its command byte (3).
    proxy.cut_after_reply(b"COMMIT\x00" if connection.vendor == "postgresql" else b"\x03COMMIT")
    deadline = time.monotonic() + 30
    while proxy.cuts == cuts and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proxy.cuts > cuts, "the worker sent no COMMIT in 30 s: no reply was lost"
    noted(worker)
    proxy.heal()


def connections_killed(round_: Round, worker: Worker) -> None:
    """F4: every connection of the worker ended at once (a RST from the network's side)."""
    noted(worker)
    round_.proxies[worker.pid].reset()
    time.sleep(0.3)


def slow(round_: Round, worker: Worker) -> None:
    """F5: every round trip 200 ± 50 ms for two seconds."""
    proxy = round_.proxies[worker.pid]
    noted(worker)
    proxy.delay(0.1, 0.025)  # each direction: a round trip is twice that
    time.sleep(2)
    proxy.heal()


def clock_jumped(round_: Round, worker: Worker) -> None:
    """F6: the worker's wall clock an hour ahead or behind for a second, then back."""
    clock = round_.clocks[worker.pid]
    noted(worker)
    clock.write_text(random.choice(["+1h", "-1h"]) + "\n")
    time.sleep(1)
    clock.write_text("+0\n")


CLASSES: dict[str, Callable[[Round, Worker], None]] = {
    "paused": paused,
    "killed": killed,
    "cut off": cut_off,
    "reply lost": reply_lost,
    "connections killed": connections_killed,
    "slow": slow,
    "clock jumped": clock_jumped,
}


def victim(round_: Round) -> Worker:
    """A live worker with a pass asleep in a step body now, if one comes within seconds: a
    fault should land on work in flight."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        busy = [w for w in round_.live() if audit.asleep(round_.log_dir, w.pid)]
        if busy:
            return random.choice(busy)
        time.sleep(0.01)
    return random.choice(round_.live())


def _keep_backlog(round_: Round, stop: threading.Event) -> None:
    try:
        while not stop.is_set():
            waiting = audit.statuses(round_.runs)
            short = BACKLOG - waiting["running"]
            for _ in range(max(short, 0)):
                instance = f"{round_.name}-{len(round_.runs)}"
                round_.runs.append(start(WALK, PAYLOAD, instance=instance).run.pk)
            stop.wait(0.2)
    finally:
        connection.close()


def play(name: str, fault: Callable[[Round, Worker], None], log_dir: Path) -> dict[str, object]:
    """One class's round; its row of the table."""
    log_dir.mkdir()
    Effect.objects.all().delete()  # the audit reads every side effect: this round's only
    round_ = Round(name, log_dir, Fleet(log_dir, [WALK]))
    stop = threading.Event()
    supply = threading.Thread(target=_keep_backlog, args=(round_, stop))
    try:
        for concurrency in CONCURRENCY:
            round_.start_worker(concurrency)
        supply.start()
        wait_for(
            lambda: (
                {one.pid for one in audit.invocations(log_dir)}
                >= {worker.pid for worker in round_.live()}
            ),
            "every worker to begin a pass",
            120,
        )
        for _ in range(FAULTS):
            time.sleep(random.uniform(0.1, 0.5))
            fault(round_, victim(round_))
            round_.faults += 1
        stop.set()
        supply.join()
        assert audit.settled(round_.runs, 180), audit.statuses(round_.runs)
    finally:
        stop.set()
        if supply.is_alive():
            supply.join()
        round_.stop()

    faults = round_.fleet.faults()
    spans = audit.intervals(log_dir, faults)
    overlapping = audit.overlaps(spans)
    found = audit.statuses(round_.runs)
    in_flight = sum(
        len(audit.open_at(log_dir, pid, instant))
        for pid, instants in faults.items()
        for instant in instants
    )
    row = {
        "class": name,
        "faults": round_.faults,
        "runs": len(round_.runs),
        "passes": sum(len(passes) for passes in spans.values()),
        "duplicates": None,
        "stale writes refused": sum(one.how == "LeaseLost" for one in audit.invocations(log_dir)),
        "lost": len(round_.runs) - found["done"],
        "overlapping": len(overlapping),
    }
    from django_leasejobs.models import Run

    errors = set(
        Run.objects.filter(pk__in=round_.runs, status="failed").values_list(
            "last_error", flat=True
        )[:3]
    )
    assert found["done"] == len(round_.runs), (found, errors)
    audit.assert_never_two_at_once(spans)
    audit.assert_only_committed_writes(round_.runs, PASSES, STEPS)
    row["duplicates"] = audit.assert_side_effects(
        round_.runs, PASSES, STEPS, faulted=faults, in_flight=in_flight
    )
    return row


def test_f9_the_fault_matrix_holds_every_invariant(tmp_path, capsys):
    """F9: every fault class of §17 in turn, each audited; the table docs/chaos.md publishes."""
    chosen = os.environ.get("LEASEJOBS_MATRIX_CLASSES")
    classes = {
        name: fault for name, fault in CLASSES.items() if not chosen or name in chosen.split(",")
    }
    assert classes, f"LEASEJOBS_MATRIX_CLASSES names none of {sorted(CLASSES)}"
    rows = [play(name, fault, tmp_path / name.replace(" ", "-")) for name, fault in classes.items()]
    columns = list(rows[0])
    database = "mariadb" if getattr(connection, "mysql_is_mariadb", False) else connection.vendor
    lines = [
        f"| {database} | " + " | ".join(str(row[column]) for column in columns) + " |"
        for row in rows
    ]
    with capsys.disabled():
        print("\n| database | " + " | ".join(columns) + " |")
        print("|---" * (len(columns) + 1) + "|")
        print("\n".join(lines))
    if os.environ.get("LEASEJOBS_MATRIX_REPORT"):
        with open(os.environ["LEASEJOBS_MATRIX_REPORT"], "a") as report:
            report.write("\n".join(lines) + "\n")
    assert all(row["faults"] == FAULTS for row in rows)
