"""Real, separate processes on the test database: the only way a concurrency claim is proven.

* :func:`run_together` calls one function in several processes at once,
  released together through a barrier, each with its own connection -- never
  threads sharing one connection. The parent test must use
  ``django_db(transaction=True)`` so that what it writes is committed and
  visible to the children.
* :func:`django_command` and :func:`python` start a ``manage.py``-style
  command or a snippet as a child process; :func:`against_unreachable_database`
  runs one against a database it cannot reach; :func:`take_over_while` is the
  would-be thief of a worker's passes.
* The functions below "run inside a child" are what the children call.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connection

BARRIER_TIMEOUT = 120


def _child(target: str, db_name: str, barrier: Any, results: Any, args: tuple[Any, ...]) -> None:
    os.environ["LEASEJOBS_TEST_DB_NAME"] = db_name
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    try:
        import django

        django.setup()
        from django.db import connection as child_connection
        from django.utils.module_loading import import_string

        function = import_string(target)
        child_connection.ensure_connection()  # Connect before the barrier, not after.
        barrier.wait(BARRIER_TIMEOUT)
        results.put(("ok", os.getpid(), function(*args)))
    except BaseException:
        results.put(("error", os.getpid(), traceback.format_exc()))
    finally:
        from django.db import connections

        connections.close_all()


def run_together(target: str, processes: int, *args: Any) -> list[Any]:
    """Call the function at dotted path *target* in *processes* processes at once.

    Returns each process's return value. Fails the test with the child's
    traceback if any child raised.
    """
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(processes)
    results = context.Queue()
    children = [
        context.Process(
            target=_child, args=(target, connection.settings_dict["NAME"], barrier, results, args)
        )
        for _ in range(processes)
    ]
    try:
        for child in children:
            child.start()
        outcomes = [results.get(timeout=BARRIER_TIMEOUT * 2) for _ in children]
        for child in children:
            child.join(timeout=60)
    finally:  # a child that hangs, or one left by a failure above, is ended here
        for child in children:
            if child.is_alive():
                child.kill()
            if child.pid is not None:
                child.join()
    errors = [detail for status, _pid, detail in outcomes if status == "error"]
    assert not errors, "a worker process failed:\n" + "\n".join(errors)
    return [value for _status, _pid, value in outcomes]


def command_env(**extra: str) -> dict[str, str]:
    """The environment for a child that must use the test database the parent created."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONUNBUFFERED": "1"}
    env |= extra
    env["LEASEJOBS_TEST_DB_NAME"] = str(connection.settings_dict["NAME"])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    return env


#: Every process a test started through this module, until the test's teardown ends it
#: (``tests/conftest.py``'s autouse ``_processes_ended``): a test that fails half-way
#: leaves no worker behind. Only the test's own thread starts them.
started: list[subprocess.Popen] = []


def spawned(process: subprocess.Popen) -> subprocess.Popen:
    """Note *process* as one the running test started: its teardown ends it (:data:`started`)."""
    started.append(process)
    return process


def django_command(
    *args: str, env: dict[str, str] | None = None, under: tuple[str, ...] = (), **popen
) -> subprocess.Popen:
    """Start ``python -m django <args>`` against the test database (*env*: more variables;
    *under*: a program to run it under, e.g. ``("faketime", "-f", "-20m")``)."""
    return spawned(
        subprocess.Popen(
            [*under, sys.executable, "-m", "django", *args],
            env=command_env(**(env or {})),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            **popen,
        )
    )


def end_started() -> list[subprocess.Popen]:
    """End every process the test started that still runs, and reap them all; those it ended.

    SIGTERM first (a worker lets its passes in flight finish and exits), SIGKILL
    for one that has not stopped after 30 s.
    """
    running = [process for process in started if process.poll() is None]
    for process in running:
        process.terminate()
    for process in running:
        end(process)
    for process in started:
        process.wait()  # reaped: no zombie left
        for pipe in (process.stdin, process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()
    started.clear()
    return running


def end(process: subprocess.Popen, timeout: float = 30) -> tuple[str | None, str | None]:
    """End *process* whatever state it is in: SIGTERM, wait, SIGKILL if it did not stop, reap.

    For a fixture's teardown, so that a failing test leaves no process behind.
    Returns what it wrote, when its output was piped.
    """
    if process.poll() is None:
        process.terminate()
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.communicate()


def refused_usage(*args: str, timeout: float = 60) -> list[str]:
    """Run ``python -m django rundueJobs <args>``, which its argparse must refuse: its stderr lines.

    Fails unless the command exits non-zero with nothing on stdout, and the last
    line (after argparse's usage block) is the only one that names an error.
    """
    command = django_command("rundueJobs", *args)
    out, err = command.communicate(timeout=timeout)
    assert command.returncode != 0, (out, err)
    assert out == ""
    lines = err.strip().splitlines()
    (reason,) = [line for line in lines if "error" in line]
    assert reason == lines[-1]
    return lines


def take_over_while(
    worker: subprocess.Popen, job: str, ready: Callable[[], bool], timeout: float = 60
) -> tuple[int, str, str]:
    """Drive *job* here for as long as *worker* runs: a would-be thief of its passes (L1, L10).

    *ready* says the worker's passes have begun (before, the thief would win
    them). Returns the runs this process attempted and the worker's output;
    a worker still running when the test fails is killed.
    """
    from django_leasejobs import run_due_jobs

    attempted = 0
    try:
        assert ready()
        while worker.poll() is None:
            attempted += run_due_jobs(jobs=[job]).attempted
            time.sleep(0.05)
        out, err = worker.communicate(timeout=timeout)
    finally:
        if worker.poll() is None:
            worker.kill()
    return attempted, out, err


class Lines:
    """A child's output, line by line as it comes (a thread reads the pipe).

    For a test that waits for what a worker prints -- its first drive's
    report, three idle drives at ``-v 2`` -- rather than sleeping and then
    reading it all.
    """

    def __init__(self, stream) -> None:
        import queue
        import threading

        self._lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            self._lines.put(line)

    def next(self, timeout: float) -> str | None:
        """The next line, or ``None`` if none came within *timeout* seconds."""
        import queue

        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            return None
        self.seen.append(line)
        return line

    def skip(self) -> None:
        """Drop the lines that came so far: a wait after this counts only later ones."""
        while self.next(0) is not None:
            pass

    def wait_for(
        self, condition: Callable[[str], bool], what: str, count: int = 1, seconds: float = 60
    ) -> list[str]:
        """Read lines until *count* of them meet *condition*; fail naming *what* after *seconds*."""
        deadline = time.monotonic() + seconds
        met: list[str] = []
        while len(met) < count:
            left = deadline - time.monotonic()
            assert left > 0, f"gave up waiting for {what}; read so far: {self.seen}"
            line = self.next(min(left, 1.0))
            if line is not None and condition(line):
                met.append(line)
        return met


def resting(process: subprocess.Popen) -> bool:
    """Whether every thread of *process* is blocked on a lock or an event (Linux's ``wchan``).

    A worker between drives waits on an ``Event`` for its rest (W1); while it
    does, nothing it runs can race a write the test makes. Reading, computing
    or waiting on a socket is not resting. (A worker resting on a LISTEN
    connection waits in ``select``, not on a lock: for SQLite and MariaDB only.)
    """
    try:
        threads = os.listdir(f"/proc/{process.pid}/task")
        waits = []
        for thread in threads:
            with open(f"/proc/{process.pid}/task/{thread}/wchan") as wchan:
                waits.append(wchan.read())
    except OSError:
        return False
    return all("futex" in wait for wait in waits)


@contextmanager
def frozen(process: subprocess.Popen, timeout: float = 60) -> Iterator[None]:
    """*process* stopped (SIGSTOP) for the block, every thread of it; SIGCONT after.

    What the test reads in the block is what the process would leave if it were
    killed right there: no thread of it moves between the read and a SIGKILL.
    (Reads do not wait on a stopped writer: SQLite runs in WAL mode here, and
    PostgreSQL and MariaDB read a snapshot.)
    """
    import signal

    process.send_signal(signal.SIGSTOP)
    try:
        deadline = time.monotonic() + timeout
        while not _stopped(process):
            assert process.poll() is None, "the process exited instead of stopping"
            assert time.monotonic() < deadline, "the process did not stop"
            time.sleep(0.005)
        yield
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)


def _stopped(process: subprocess.Popen) -> bool:
    try:
        states = []
        for thread in os.listdir(f"/proc/{process.pid}/task"):
            with open(f"/proc/{process.pid}/task/{thread}/stat") as stat:
                states.append(stat.read().rsplit(")", 1)[1].split()[0])
    except OSError:
        return False
    return all(state in "tT" for state in states)


def python(code: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``python -c <code>`` with Django set up on the test database (*env*: more
    variables)."""
    prelude = "import django; django.setup()\n"
    return spawned(
        subprocess.Popen(
            [sys.executable, "-c", prelude + code],
            env=command_env(**(env or {})),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    )


def with_wall_clock_off(offset: str, *args: str) -> subprocess.Popen:
    """Start ``python -m django <args>`` whose wall clock is *offset* off (``-20m``, ``+10m``).

    Under Debian's ``faketime`` (libfaketime); a test that needs it fails,
    never skips, where it is missing. Only the wall clock: a machine whose
    clock is wrong still counts its monotonic clock from boot, and
    libfaketime's faked monotonic clock makes Python's timed lock waits hang
    (with it left alone, libfaketime makes Python's ``time.sleep`` fail with
    EINVAL: give it work that does not sleep, a one-shot drive).
    """
    import shutil

    faketime = shutil.which("faketime")
    assert faketime, "faketime is not installed: apt-get install faketime (.ci/run installs it)"
    env = {"FAKETIME_DONT_FAKE_MONOTONIC": "1", "NO_FAKE_STAT": "1"}
    return django_command(*args, env=env, under=(faketime, "-f", offset))


def against_unreachable_database(url: str, *args: str) -> subprocess.CompletedProcess:
    """Run ``python -m django <args>`` with ``DATABASE_URL`` = *url*, a database it cannot reach."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "DATABASE_URL": url}
    env.pop("LEASEJOBS_TEST_DB_NAME", None)
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# -- run inside a child -------------------------------------------------------------------


def start_each(job: str, instances: list[str], payload, again: bool) -> list[tuple[str, str, bool]]:
    """Call start() once per instance, in order; return (instance, run id, joined)."""
    from django_leasejobs import start

    outcomes = []
    for instance in instances:
        result = start(job, payload, instance=instance, again=again)
        outcomes.append((instance, result.run.pk, result.joined))
    return outcomes


def start_batch(job: str, instances: list[str]) -> list[tuple[str, str, bool]]:
    """One start_many() of *instances*, in this process's own order: (instance, id, joined)."""
    import random

    from django_leasejobs import start_many

    mine = random.Random(os.getpid()).sample(instances, len(instances))
    results = start_many(job, [(instance, {"pid": os.getpid()}) for instance in mine])
    return [(r.run.instance, r.run.pk, r.joined) for r in results]


def drain(job: str, seconds: float, max_passes: int = 1) -> dict[str, int]:
    """Drive *job* until none of its runs is live (or *seconds* pass); return the totals."""
    import time

    from django_leasejobs import run_due_jobs
    from django_leasejobs.models import Run

    fields = ("attempted", "advanced", "completed", "retrying", "failed", "superseded")
    totals = dict.fromkeys(fields, 0)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        report = run_due_jobs(jobs=[job], limit=10, max_passes=max_passes)
        for name in fields:
            totals[name] += getattr(report, name)
        if report.attempted == 0:
            if not Run.objects.filter(job=job, status="running").exists():
                break
            time.sleep(0.01)
    return totals


def drive_once(jobs: list[str]) -> dict[str, int]:
    """One drive of *jobs*; the report's counts."""
    from django_leasejobs import run_due_jobs

    report = run_due_jobs(jobs=jobs)
    return {"attempted": report.attempted, "completed": report.completed}


def kick_and_drive(job: str, instances: list[str], seconds: float) -> dict[str, list[str]]:
    """Kick *instances* (``start(again=True)``) and drive *job*, over and over, for *seconds*.

    Run in several processes at once, kicks land on runs other processes are
    committing: the two writes that deadlocked on MariaDB before they took
    their locks in one order. Returns what went wrong, by where it surfaced.
    """
    import time

    from django.db import DatabaseError

    from django_leasejobs import run_due_jobs, start

    problems: dict[str, list[str]] = {"start": [], "drive": []}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for instance in instances:
            try:
                start(job, {"i": instance}, instance=instance, again=True)
            except DatabaseError as exc:
                problems["start"].append(repr(exc))
        report = run_due_jobs(jobs=[job], limit=len(instances))
        problems["drive"] += [note.text for note in report.errors]
        if report.aborted:
            problems["drive"].append(f"aborted: {report.aborted}")
    return problems


def deployment(expression: str, seconds: float) -> int:
    """Be one deployment of a rolling deploy: register ``t.rolling`` with *expression*
    and drive it every 0.1 s for *seconds*. Returns how many drives reported errors."""
    import time

    from django_leasejobs import job, run_due_jobs

    job("t.rolling", schedule=expression, timezone="UTC")(lambda p: p.done())
    failures = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        errors = run_due_jobs(jobs=["t.rolling"]).errors
        if errors:  # said on stderr, so that a failing test shows what went wrong
            print(f"drive errors: {errors}", file=sys.stderr, flush=True)
        failures += bool(errors)
        time.sleep(0.1)
    return failures


def count_and_flush(rounds: int, passes: int) -> int:
    """O1: count *passes* passes of two keys, then flush, *rounds* times; return the rows written.

    Run in several processes at once, their flushes land on the same rows together.
    """
    from django_leasejobs.stats import aggregate

    written = 0
    for _ in range(rounds):
        for n in range(passes):
            aggregate.observe("t.stats.shared", "default", "completed", 0.001 * n)
            aggregate.observe("t.stats.shared", "default", "failed", 0.2)
        written += aggregate.flush(force=True)
    return written
