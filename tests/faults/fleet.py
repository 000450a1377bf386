"""Worker processes for the fault tests, and the faults a test does to them by hand (§17).

:class:`Fleet` starts ``rundueJobs --loop --interval 0.1 --concurrency C``
workers through tests/processes.py (so the test's teardown ends every one of
them, whatever happens), each with its output in a file of the test's
directory (a pipe nobody reads would fill and block the worker), optionally
through a :class:`~tests.faults.proxy.FaultProxy` (``LEASEJOBS_TEST_DB_PORT``) and
with more environment (``LD_PRELOAD`` libfaketime, connection options...).

:func:`pause` / :func:`resume` stop and continue a process (SIGSTOP/SIGCONT);
:func:`kill_backends` has the database end a worker's connections
(``pg_terminate_backend`` / ``KILL``), found by the client port the worker's
sockets use.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from django.db import connection

from tests.processes import command_env, spawned


@dataclass
class Worker:
    process: subprocess.Popen
    output: Path  # stdout and stderr, together
    #: Monotonic instants (ns) of the faults done to it: what tests/faults/audit.py reads.
    faults: list[int] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.output.read_text()


class Fleet:
    """``rundueJobs --loop`` workers of one test, each writing its invocations to *log_dir*."""

    def __init__(self, log_dir: Path, jobs: list[str], concurrency: int = 1, verbosity: int = 1):
        self.log_dir = log_dir
        self.jobs = jobs
        self.concurrency = concurrency
        self.verbosity = verbosity
        self.workers: list[Worker] = []

    def start(self, port: int | None = None, env: dict[str, str] | None = None) -> Worker:
        """One more worker; through the proxy on *port* when given; *env*: more variables."""
        extra = {"LEASEJOBS_FAULTS_DIR": str(self.log_dir), **(env or {})}
        if port is not None:
            extra["LEASEJOBS_TEST_DB_PORT"] = str(port)
        number = len(self.workers)
        output = self.log_dir / f"worker-{number}.out"
        jobs = [arg for name in self.jobs for arg in ("--job", name)]
        with open(output, "w") as out:
            process = spawned(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "django",
                        "rundueJobs",
                        "--loop",
                        "--interval",
                        "0.1",
                        "--concurrency",
                        str(self.concurrency),
                        "-v",
                        str(self.verbosity),
                        *jobs,
                    ],
                    env=command_env(**extra),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
        worker = Worker(process, output)
        self.workers.append(worker)
        return worker

    def faults(self) -> dict[int, list[int]]:
        """pid -> the instants of its faults, for :func:`tests.faults.audit.intervals`."""
        return {worker.pid: worker.faults for worker in self.workers if worker.faults}

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM every worker still running and wait for it (SIGKILL past *timeout*)."""
        for worker in self.workers:
            if worker.process.poll() is None:
                worker.process.terminate()
        for worker in self.workers:
            try:
                worker.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()


def pause(worker: Worker) -> int:
    """SIGSTOP *worker*; the monotonic instant (ns), noted as one of its faults."""
    os.kill(worker.pid, signal.SIGSTOP)
    at = time.monotonic_ns()
    worker.faults.append(at)
    return at


def resume(worker: Worker) -> None:
    os.kill(worker.pid, signal.SIGCONT)


def client_ports(pid: int, server_port: int) -> set[int]:
    """The local ports of *pid*'s TCP connections to 127.0.0.1:*server_port* (from /proc)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            next(rows)
            for row in rows:
                fields = row.split()
                local, remote, inode = fields[1], fields[2], fields[9]
                if inode in inodes and int(remote.split(":")[1], 16) == server_port:
                    ports.add(int(local.split(":")[1], 16))
    return ports


def kill_backends(pid: int | None = None, server_port: int | None = None) -> int:
    """Have the database end the connections of the worker *pid* (every other client's of
    the test database when None; this test's own connection is spared); how many.

    Matched by the client's port, which the server sees (``pg_stat_activity.client_port``,
    MariaDB's ``processlist.HOST`` ``127.0.0.1:port``). A worker going through a proxy
    reaches the server from the proxy's ports: pass *server_port* = the proxy's port to
    find its connections to the proxy -- then the proxy's own upstream ports are unknown
    here, and every client but this test is ended (use :meth:`FaultProxy.reset` instead).
    """
    vendor = connection.vendor
    if server_port is None:
        server_port = int(
            connection.settings_dict.get("PORT") or {"postgresql": 5432}.get(vendor, 3306)
        )
    ports = client_ports(pid, server_port) if pid is not None else None
    name = connection.settings_dict["NAME"]
    with connection.cursor() as cursor:
        if vendor == "postgresql":
            cursor.execute(
                "SELECT pid, client_port FROM pg_stat_activity WHERE datname = %s "
                "AND pid <> pg_backend_pid()",
                [name],
            )
            victims = [row[0] for row in cursor.fetchall() if ports is None or row[1] in ports]
            for backend in victims:
                cursor.execute("SELECT pg_terminate_backend(%s)", [backend])
        else:
            cursor.execute(
                "SELECT id, host FROM information_schema.processlist WHERE db = %s "
                "AND id <> CONNECTION_ID()",
                [name],
            )
            victims = [
                row[0]
                for row in cursor.fetchall()
                if ports is None or int(str(row[1]).rpartition(":")[2] or 0) in ports
            ]
            for backend in victims:
                try:
                    cursor.execute(f"KILL {int(backend)}")
                except Exception:  # gone meanwhile
                    continue
    return len(victims)


#: How much of a step's sleep (tests/faults/jobs.py) must be left for a fault to land in it.
ASLEEP_FOR_NS = int(0.35e9)


def when_asleep(worker: Worker, runs: list[str], log_dir: Path, seconds: float = 60) -> None:
    """Wait until *worker* has a pass of each of *runs* asleep in a step body, with most of
    the sleep still ahead: no lock held, no statement on the wire -- the instant to strike."""
    from tests.faults.audit import asleep
    from tests.utils import wait_for

    def all_asleep() -> bool:
        now = time.monotonic_ns()
        fresh = {r for r, at in asleep(log_dir, worker.pid).items() if now - at < ASLEEP_FOR_NS}
        return fresh == set(runs)

    wait_for(
        all_asleep, "the passes asleep in their steps", seconds, every=0.01, worker=worker.process
    )
