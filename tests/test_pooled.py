"""§13, W5: connection-light passes on Django's own pool (``OPTIONS["pool"]``, PostgreSQL).

Each test starts a real ``rundueJobs --loop --concurrency N`` whose alias borrows
from Django's psycopg pool of a few connections (``tests/settings.py`` merges
``LEASEJOBS_TEST_DB_OPTIONS`` into the alias's ``OPTIONS``), and holds its passes
in flight on a gate -- a file the test creates -- as handlers waiting on a slow
upstream, touching no database (``tests.gated``). A pass thread that kept its
connection through its handler would keep one of the pool's few: the passes past
the pool's size could never begin. The worker's server connections are counted
in ``pg_stat_activity`` by their ``application_name``: at most the pool's size,
and one more for the W2 listener, which LISTENs on a session of its own.
"""

from __future__ import annotations

import json
import signal
import subprocess
import uuid
from datetime import datetime
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from django_leasejobs import RunStatus, start, start_many
from django_leasejobs.models import Run, Step
from tests.processes import Lines, django_command, python
from tests.utils import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]

postgresql_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="Django's connection pool is PostgreSQL's"
)

WAIT = 120  # seconds: the longest a test waits for its runs


def _pooled(name: str, size: int) -> dict[str, str]:
    """A worker's environment: Django's pool of at most *size*, its connections named *name*."""
    options = {"pool": {"min_size": 1, "max_size": size, "timeout": 60}, "application_name": name}
    return {"LEASEJOBS_TEST_DB_OPTIONS": json.dumps(options)}


def _server_connections(name: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [name])
        return int(cursor.fetchone()[0])


def _begun(job: str) -> int:
    return Run.objects.filter(job=job, lease_began_at__isnull=False).count()


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def _worker(name: str, size: int, job: str, concurrency: int) -> subprocess.Popen:
    return django_command(
        "rundueJobs", "--loop", "--concurrency", str(concurrency), "--job", job, "-v", "2",
        env=_pooled(name, size),
    )  # fmt: skip


def _done_and_stopped(worker: subprocess.Popen, job: str, gate: Path, count: int) -> str:
    """Open *gate*, wait for *job*'s *count* runs to be done, SIGTERM *worker*: what it said,
    once it exited cleanly without a statement waiting out the pool's timeout. (Should this
    fail half-way, the test's teardown ends the worker: tests/processes.py.)"""
    gate.touch()
    wait_for(
        lambda: Run.objects.filter(job=job, status=RunStatus.DONE).count() == count,
        f"the {count} runs",
        WAIT,
        worker=worker,
    )
    worker.send_signal(signal.SIGTERM)
    _out, err = worker.communicate(timeout=WAIT)
    assert worker.returncode == 0, err
    assert "couldn't get a connection" not in err, err
    return err


@postgresql_only
def test_w5_on_djangos_pool_passes_waiting_on_an_upstream_hold_no_connection(tmp_path):
    """Eight passes in flight at once on a pool of one, each waiting in a step after a first
    one; each lease renewed by its heartbeat."""
    job, name, gate = "tests.gated_steps", f"lj-{uuid.uuid4().hex[:12]}", tmp_path / "gate"
    runs = [start(job, {"until_file": str(gate)}, instance=f"p{n}").run for n in range(8)]
    for run in runs[:4]:  # these resume after a first step: their passes read the ledger first
        Step.objects.create(run_id=run.pk, name="first", result="1", recorded_at=timezone.now())
        Run.objects.filter(pk=run.pk).update(has_steps=True)
    worker = _worker(name, 1, job, concurrency=8)
    most = 0

    def all_begun() -> bool:
        nonlocal most
        most = max(most, _server_connections(name))
        return _begun(job) == 8

    wait_for(all_begun, "eight passes to begin on a pool of one", WAIT, worker=worker)
    first: dict[str, datetime] = dict(
        Run.objects.filter(job=job).values_list("pk", "next_attempt_at")
    )

    def all_renewed() -> bool:
        nonlocal most
        most = max(most, _server_connections(name))
        now = dict(Run.objects.filter(job=job).values_list("pk", "next_attempt_at"))
        return all(now[pk] > first[pk] for pk in first)

    # L10 through the pool: each heartbeat borrows for its renewal and puts it back.
    wait_for(all_renewed, "each lease renewed by its heartbeat", WAIT, worker=worker)
    err = _done_and_stopped(worker, job, gate, 8)
    # The listener LISTENs on a session of its own: had it taken the pool's one connection,
    # every pass and heartbeat would have waited out the pool's timeout for it.
    assert "polling instead" not in err, err
    assert most <= 1 + 1, f"{most} server connections: a pool of 1, and the listener"
    assert {run.pk for run in runs} == set(
        Run.objects.filter(job=job, status=RunStatus.DONE, attempts=0).values_list("pk", flat=True)
    )  # none taken over: every lease held by its heartbeat till the pass committed


@postgresql_only
def test_w5_on_djangos_pool_256_passes_at_once_on_8_connections_and_a_graceful_stop(tmp_path):
    """``--concurrency 256`` is a setting to use: 256 threads start, each holds a pass in
    flight, on 8 pooled connections and a bounded memory; SIGTERM lets all 256 finish."""
    job, name, gate = "tests.gated", f"lj-{uuid.uuid4().hex[:12]}", tmp_path / "gate"
    start_many(job, [(f"q{n:03}", {"until_file": str(gate)}) for n in range(256)])
    worker = _worker(name, 8, job, concurrency=256)
    said = Lines(worker.stderr)
    most = 0

    def all_begun() -> bool:
        nonlocal most
        most = max(most, _server_connections(name))
        return _begun(job) == 256

    try:
        wait_for(all_begun, "256 passes to begin on a pool of eight", WAIT, worker=worker)
        rss = _rss_mb(worker.pid)
        worker.send_signal(signal.SIGTERM)
        said.wait_for(lambda line: "Worker stopping" in line, "the signal to be heard")
        gate.touch()
        worker.wait(WAIT)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0, "".join(said.seen)
    assert Run.objects.filter(job=job, status=RunStatus.DONE).count() == 256
    assert not Run.objects.filter(job=job, lease_owner__isnull=False).exists()  # nothing held
    assert most <= 8 + 1, f"{most} server connections: a pool of 8, and the listener"
    assert rss <= 300, f"{rss:.0f} MB resident with 256 passes in flight"


@postgresql_only
def test_w5_on_djangos_pool_a_dispatcher_waiting_for_a_free_thread_holds_no_connection(tmp_path):
    """Six runs for two threads and a backlog of two, on a pool of one: the dispatcher read
    the due runs on the pool's one connection, and waits for a thread with none."""
    job, name, gate = "tests.gated", f"lj-{uuid.uuid4().hex[:12]}", tmp_path / "gate"
    for n in range(6):
        start(job, {"until_file": str(gate)}, instance=f"d{n}")
    worker = _worker(name, 1, job, concurrency=2)
    wait_for(lambda: _begun(job) >= 2, "two passes to begin on a pool of one", WAIT, worker=worker)
    _done_and_stopped(worker, job, gate, 6)


@postgresql_only
def test_s13_a_handlers_own_transaction_keeps_its_pooled_connection():
    """``put_back()`` leaves a connection inside a transaction with its thread: it *is* the
    transaction; outside one, the connection goes back to the pool."""
    code = """
from django.db import connection, transaction
from django_leasejobs.pooled import put_back
from tests.models import Effect

with transaction.atomic():
    Effect.objects.create(run_id="r", name="inside", pid=0)
    held = connection.connection
    put_back()
    assert connection.connection is held, "a transaction's connection was put back"
    Effect.objects.create(run_id="r", name="still inside", pid=0)
put_back()
assert connection.connection is None, "a pooled connection was kept outside a transaction"
assert Effect.objects.filter(run_id="r").count() == 2
print("ok")
"""
    child = python(code, env=_pooled(f"lj-{uuid.uuid4().hex[:12]}", 1))
    out, err = child.communicate(timeout=WAIT)
    assert child.returncode == 0, err
    assert out.strip() == "ok"


def test_s13_without_a_pool_a_threads_connection_is_kept_for_its_next_pass():
    """W5, §13: without a pool, ``put_back()`` leaves a thread's connection with it, so the
    next pass on that thread sends its claim on it without opening one."""
    from django_leasejobs.pooled import put_back

    connection.ensure_connection()
    held = connection.connection
    put_back()
    assert connection.connection is held
