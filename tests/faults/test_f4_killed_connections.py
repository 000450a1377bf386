"""F4 Connections killed: the database ends a worker's connections while it works.

``pg_terminate_backend`` (PostgreSQL) or ``KILL CONNECTION`` (MariaDB) ends one
connection of a real ``rundueJobs --loop`` worker at a time, chosen at random
among those it holds -- a pass thread's, the drive's, the listener's (W2), a
heartbeat's (L10) -- again and again while its runs drain. Each is opened
again on next use; no pass is reported done that did not commit; every run is
done, its counters exactly what its committed passes wrote, no two passes of
one run at once. Focused tests: a heartbeat whose connection was killed
renews on a new one, and never loses its lease for it; a listener whose
connection was killed listens again.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connection

from django_leasejobs import run_due_jobs, start, store
from django_leasejobs.holder import current_holder
from django_leasejobs.ids import new_owner
from django_leasejobs.models import Run
from tests.faults.audit import (
    assert_never_two_at_once,
    assert_no_run_lost,
    assert_only_committed_writes,
    assert_side_effects,
    intervals,
    settled,
)
from tests.faults.fleet import Fleet, client_ports, kill_backends
from tests.faults.jobs import BEATING, WALK
from tests.utils import wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.faults,
    pytest.mark.elsewhere(
        settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"),
        reason="SQLite has no connection for the database to end",
    ),
]

#: Three passes of two short steps per run: a killed connection lands in a pass, a step,
#: a commit, a claim, a drive's read or a rest about as often as the time each takes.
PAYLOAD = {"passes": 3, "steps": 2, "step_seconds": 0.05}
RUNS = 12
#: The most any drain here may take, faults included (each may cost a lease of 2 s).
DRAIN = 120


def _server_port() -> int:
    return int(
        connection.settings_dict.get("PORT") or {"postgresql": 5432}.get(connection.vendor, 3306)
    )


def _backends(pid: int) -> list[tuple[int, str]]:
    """The server's id of each connection of *pid*, with what it last ran (PostgreSQL)."""
    ports = client_ports(pid, _server_port())
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT pid, client_port, query FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                [connection.settings_dict["NAME"]],
            )
            return [(row[0], row[2] or "") for row in cursor.fetchall() if row[1] in ports]
        cursor.execute(
            "SELECT id, host, COALESCE(info, '') FROM information_schema.processlist "
            "WHERE db = %s AND id <> CONNECTION_ID()",
            [connection.settings_dict["NAME"]],
        )
        return [
            (row[0], row[2])
            for row in cursor.fetchall()
            if int(str(row[1]).rpartition(":")[2] or 0) in ports
        ]


def _end(backend: int) -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_terminate_backend(%s)", [backend])
        else:
            with contextlib.suppress(Exception):  # ended meanwhile: nothing to kill
                cursor.execute(f"KILL CONNECTION {int(backend)}")


def _kill_one(pid: int) -> bool:
    """Have the database end one connection of *pid*, at random; whether there was one."""
    held = _backends(pid)
    if not held:
        return False
    _end(random.choice(held)[0])
    return True


def _counted(name: str, log: str) -> int:
    """A count the worker's drive summaries add up to (``completed``, ``errors``)."""
    return sum(int(n) for n in re.findall(rf"\b{name}=(\d+)", log))


@pytest.mark.parametrize("concurrency", [1, 4])
def test_f4_connections_killed_at_random_while_runs_drain_lose_nothing(tmp_path, concurrency):
    """F4 at ``--concurrency 1`` and 4: while twelve runs of three passes drain -- half of
    them with a heartbeat (L10) -- the database ends one of the worker's connections at
    random every few tenths of a second. The worker lives on and every run is done: its
    counters, cursor and ledger are exactly what its committed passes wrote, no two
    passes of one run ran at once, a step ran twice only where a kill cut it off, and
    the worker reported no more runs completed than there are (a commit whose reply was
    lost is an error, never a completion: F3)."""
    run_ids = [
        start(WALK if n % 2 else BEATING, PAYLOAD, instance=f"f4-{n}").run.pk for n in range(RUNS)
    ]
    fleet = Fleet(tmp_path, [WALK, BEATING], concurrency=concurrency)
    worker = fleet.start()
    kills = 0
    try:
        deadline = time.monotonic() + DRAIN
        while Run.objects.filter(pk__in=run_ids, status="running").exists():
            assert time.monotonic() < deadline, f"not drained after {kills} kills: {worker.log()}"
            assert worker.process.poll() is None, worker.log()
            time.sleep(random.uniform(0.1, 0.4))  # the fault's cadence, not a wait
            kills += _kill_one(worker.pid)
        assert worker.process.poll() is None, worker.log()  # it lived through every kill
    finally:
        fleet.stop()
    log = worker.log()
    assert kills >= 5, f"only {kills} connections were killed: the test proved little"
    assert_no_run_lost(run_ids)
    assert_never_two_at_once(intervals(tmp_path, {}))
    assert_only_committed_writes(run_ids, PAYLOAD["passes"], PAYLOAD["steps"])
    assert_side_effects(
        run_ids, PAYLOAD["passes"], PAYLOAD["steps"], faulted={worker.pid}, in_flight=kills
    )
    assert _counted("completed", log) <= RUNS, log
    # Each connection killed costs at most the one pass that was using it (or about to):
    # the thread's next pass opens a new one, it does not fail on the dead one.
    assert _counted("errors", log) <= kills, log


def test_f4_l10_a_heartbeat_whose_connection_was_killed_renews_on_a_new_one(define, drive):
    """F4 + L10: a pass with no step boundary, kept by its heartbeat (2 s lease, a beat
    every ~0.7 s). The database ends the heartbeat's connection; for three leases after
    that, a would-be thief tries to take the run over every 50 ms. The heartbeat renewed
    on a new connection, so the thief never wins and the pass completes: it loses its
    lease only if the lease really expired."""
    lease = timedelta(seconds=2)
    stolen: list[str] = []
    killed: list[int] = []

    def handler(p):
        # The heartbeat's connection is this process's one other: kill it once it is open.
        killed.append(
            wait_for(lambda: kill_backends(os.getpid()), "the heartbeat's connection", 30)
        )
        until = time.monotonic() + 3 * lease.total_seconds()
        while time.monotonic() < until:
            thief = new_owner()
            if store.claim_and_read(p.run.id, thief, lease, current_holder(), takeover=True):
                stolen.append(thief)
                break
            time.sleep(0.05)
        return p.done()

    spec = define("t.f4.beating", handler, lease=lease, heartbeat=True)
    run_id = start(spec).run.pk
    report = drive(spec)
    assert len(killed) == 1
    assert killed[0] >= 1
    assert stolen == []
    assert (report.completed, report.superseded) == (1, 0)
    assert Run.objects.get(pk=run_id).status == "done"


@pytest.mark.elsewhere(
    not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
    reason="only PostgreSQL has LISTEN (W2); MariaDB polls",
)
def test_f4_w2_a_listener_whose_connection_was_killed_listens_again(tmp_path):
    """F4 + W2: the database ends the worker's LISTEN connection. The worker notices at its
    next rest, polls meanwhile, and listens again on a new connection (not after a minute
    of polling); a run started then is driven."""
    fleet = Fleet(tmp_path, [WALK])
    worker = fleet.start()
    try:

        def listening() -> set[int]:
            return {backend for backend, query in _backends(worker.pid) if "LISTEN" in query}

        first = wait_for(listening, "the worker to LISTEN", worker=worker.process)
        for backend in first:
            _end(backend)
        again = wait_for(
            lambda: listening() - first, "the worker to LISTEN again", 30, worker=worker.process
        )
        assert again
        assert not again & first
        run_id = start(WALK, {"passes": 1, "steps": 0, "step_seconds": 0}).run.pk
        assert settled([run_id], 30), worker.log()
    finally:
        fleet.stop()
    assert "LISTEN connection lost" in worker.log()
    assert Run.objects.get(pk=run_id).status == "done"
    # The drives after it: the worker went on as before.
    assert run_due_jobs(jobs=[WALK]).attempted == 0
