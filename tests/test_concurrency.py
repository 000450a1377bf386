"""W5 (revision 3): one worker process runs up to N passes at once, every lease rule intact.

Each test starts real ``rundueJobs --concurrency N`` processes on the test
database and reads the handlers' own log (``PassLog``: who ran when, on the
machine's monotonic clock, one clock for every process on Linux) to tell
what overlapped. The helpers here are shared by the other
``tests/test_concurrency_*.py`` files.
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
from collections import Counter, defaultdict

import pytest
from django.db import transaction
from django.db.transaction import TransactionManagementError

from django_leasejobs import RunStatus, run_due_jobs, start
from django_leasejobs.models import Run
from tests.models import Effect, PassLog
from tests.processes import Lines, django_command
from tests.utils import fresh, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]

JOB = "tests.concurrent"
WAIT = 60  # seconds: the longest any test here waits for its runs
COUNTS = ("attempted", "advanced", "completed", "retrying", "failed", "superseded", "held")


def _stop(worker, sig=signal.SIGTERM) -> tuple[str, str]:
    worker.send_signal(sig)
    out, err = worker.communicate(timeout=120)
    return out, err


def _live(job: str = JOB) -> int:
    return Run.objects.filter(job=job, status=RunStatus.RUNNING).count()


def _most_at_once(logs) -> int:
    """The most passes that ran at one instant, from their (start, end) intervals."""
    edges = sorted([(log.started_ns, 1) for log in logs] + [(log.ended_ns, -1) for log in logs])
    most = now = 0
    for _at, step in edges:
        now += step
        most = max(most, now)
    return most


def workers(count: int, *args: str, concurrency: int = 4) -> list[subprocess.Popen]:
    """Start *count* ``rundueJobs --loop --concurrency N --json`` workers (one report a line)."""
    base = ["rundueJobs", "--loop", "--interval", "0.05", "--concurrency", str(concurrency)]
    return [django_command(*base, "--json", "-v", "0", *args) for _ in range(count)]


def handles_sigterm(worker: subprocess.Popen) -> bool:
    """Whether *worker*'s loop has installed its SIGTERM handler (Linux: ``SigCgt``)."""
    try:
        with open(f"/proc/{worker.pid}/status") as status:
            caught = next(line for line in status if line.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return False
    return bool(int(caught.split()[1], 16) & (1 << (signal.SIGTERM - 1)))


def ready(fleet: list[subprocess.Popen]) -> None:
    """Wait until every worker of *fleet* runs its loop: on a busy machine a Python
    process takes a while to start, and a SIGTERM before its loop began kills it."""
    for worker in fleet:
        wait_for(lambda w=worker: handles_sigterm(w), "a worker's loop", every=0.02, worker=worker)


def stop_all(fleet: list[subprocess.Popen]) -> list[tuple[int | None, str, str]]:
    """SIGTERM each worker still running (it lets its passes in flight finish) and reap it."""
    running = [worker for worker in fleet if worker.poll() is None]
    ready(running)
    for worker in running:
        worker.send_signal(signal.SIGTERM)
    reaped = []
    for worker in fleet:
        try:
            out, err = worker.communicate(timeout=WAIT)
        except subprocess.TimeoutExpired:
            worker.kill()
            out, err = worker.communicate()
        reaped.append((worker.returncode, out, err))
    return reaped


def totals(reaped) -> dict:
    """The workers' ``--json`` reports added up: each count, and every error note."""
    summed: dict = dict.fromkeys(COUNTS, 0)
    summed["errors"], summed["aborted"] = [], []
    for _code, out, _err in reaped:
        for line in out.splitlines():
            report = json.loads(line)
            for name in COUNTS:
                summed[name] += report[name]
            summed["errors"] += [note["text"] for note in report["errors"]]
            if report["aborted"]:
                summed["aborted"].append(report["aborted"])
    return summed


def wait_until_settled(job: str, count: int, fleet=()) -> None:
    """Wait until *count* runs of *job* are no longer ``running`` (done, failed, held):
    the test then asserts what they came to. Fails after WAIT seconds, or at once if a
    worker exited."""
    runs = Run.objects.filter(job=job)

    def left() -> str:
        running = list(runs.filter(status=RunStatus.RUNNING).values_list("attempts", "last_error"))
        return f"{count} runs of {job} to settle ({len(running)} running: {running[:3]})"

    def settled() -> bool:
        return runs.exclude(status=RunStatus.RUNNING).count() >= count

    wait_for(settled, left, WAIT, every=0.1, worker=list(fleet))


def overlapping(spans: dict[str, list[tuple[int, int]]]) -> list[tuple[str, tuple, tuple]]:
    """Pairs of passes of one run whose intervals overlapped (L1: never)."""
    found = []
    for run_id, intervals in spans.items():
        ordered = sorted(intervals)
        found += [(run_id, a, b) for a, b in itertools.pairwise(ordered) if b[0] < a[1]]
    return found


def by_run(logs, killed_ns: int | None = None) -> dict[str, list[tuple[int, int]]]:
    """Each run's passes as (start, end); one that never ended ends at *killed_ns*."""
    spans: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for log in logs:
        end = log.ended_ns or killed_ns
        assert end, f"a pass of {log.run_id} never ended and no worker was killed"
        spans[log.run_id].append((log.started_ns, end))
    return spans


# -- N passes at once -------------------------------------------------------------------------


def test_w5_n_passes_of_n_runs_overlap_in_one_process(tmp_path):
    gate = tmp_path / "all-four-began"  # each pass is held until the test opens it
    for n in range(4):
        start(JOB, {"sleep": 60, "until_file": str(gate)}, instance=f"o{n}")
    worker = django_command("rundueJobs", "--loop", "--concurrency", "4", "--job", JOB)
    try:
        wait_for(lambda: PassLog.objects.count() == 4, "four passes to begin", worker=worker)
        gate.touch()
        wait_for(lambda: _live() == 0, "the four runs", worker=worker)
    finally:
        _out, err = _stop(worker)
    assert worker.returncode == 0, err
    logs = list(PassLog.objects.all())
    assert len(logs) == 4
    assert len({log.pid for log in logs}) == 1  # one process ...
    assert _most_at_once(logs) == 4  # ... four passes at once


def test_w5_a_slow_pass_does_not_hold_back_the_short_runs_behind_it():
    # Held until the quick runs are done, for 60 s at most (tests/jobs.py ``_held``): only
    # quick runs held back behind it let it run its length, and end after it.
    slow = start(JOB, {"sleep": 60, "until_done": "b"}, instance="a-slow").run
    quick = [start(JOB, {"sleep": 0}, instance=f"b{n:02}").run for n in range(20)]
    worker = django_command("rundueJobs", "--loop", "--concurrency", "4", "--job", JOB)
    try:
        wait_for(lambda: _live() == 0, "the 21 runs", 120, worker=worker)
    finally:
        _stop(worker)
    slow_pass = PassLog.objects.get(run_id=slow.pk)
    ended = PassLog.objects.filter(run_id__in=[run.pk for run in quick])
    assert ended.count() == 20
    assert all(log.ended_ns < slow_pass.ended_ns for log in ended)


def test_w5_sigterm_lets_the_passes_in_flight_finish_and_begins_none(tmp_path):
    gate = tmp_path / "signal-heard"  # the passes in flight end only once it exists
    for n in range(8):
        start(JOB, {"sleep": 60, "until_file": str(gate)}, instance=f"t{n}")
    worker = django_command(  # -v 2: the signal is logged as it is handled
        "rundueJobs", "--loop", "--concurrency", "4", "--job", JOB, "-v", "2"
    )
    said = Lines(worker.stderr)
    wait_for(lambda: PassLog.objects.count() == 4, "four passes to begin", worker=worker)
    worker.send_signal(signal.SIGTERM)
    said.wait_for(lambda line: "Worker stopping" in line, "the signal to be heard")
    gate.touch()
    worker.wait(WAIT)
    out = worker.stdout.read()
    err = "".join(said.seen)
    assert worker.returncode == 0, err
    logs = list(PassLog.objects.all())
    assert len(logs) == 4  # none began after the signal
    assert all(log.ended_ns for log in logs)  # every pass in flight finished
    assert Run.objects.filter(job=JOB, status=RunStatus.DONE).count() == 4
    assert _live() == 4
    assert not Run.objects.filter(job=JOB, lease_owner__isnull=False).exists()  # nothing held
    # Every drive's report is printed at -v 2: the four completions may span two of them.
    completed = [int(word.split("=")[1]) for word in out.split() if word.startswith("completed=")]
    assert sum(completed) == 4, out


def test_w5_l1_two_passes_of_one_run_never_overlap_across_threads_and_workers():
    """W5 + L1/L2: three workers of four threads, ``--max-passes 3``, twelve runs of five
    passes each: the passes of one run follow one another (never two at once, whichever
    thread or process ran them), while passes of different runs overlap -- in one
    process too. Every pass ran once and every step once: nothing was taken over."""
    job = "tests.counted_walk"  # 60 s lease: a pass is never taken over here
    payload = {"passes": 5, "steps": 2, "sleep": 0.1}
    fleet = workers(3, "--max-passes", "3", "--job", job)
    try:
        ready(fleet)  # all three contend from the first run on
        runs = [start(job, payload, instance=f"w{n:02}").run.pk for n in range(12)]
        wait_until_settled(job, len(runs), fleet)
    finally:
        reaped = stop_all(fleet)
    assert [code for code, _out, _err in reaped] == [0, 0, 0], [err for *_, err in reaped]

    logs = list(PassLog.objects.filter(run_id__in=runs))
    assert overlapping(by_run(logs)) == []
    assert len(logs) == 12 * 5  # each pass invoked once
    # Passes of different runs did overlap, and within one process (its threads).
    assert _most_at_once(logs) >= 4
    per_process = defaultdict(list)
    for log in logs:
        per_process[log.pid].append(log)
    assert max(_most_at_once(mine) for mine in per_process.values()) >= 2
    for run in Run.objects.filter(pk__in=runs):
        assert run.status == RunStatus.DONE
        assert run.decoded_counters().value == {"steps": 10, "passes": 5}
    ran = Counter(Effect.objects.filter(run_id__in=runs).values_list("run_id", "name"))
    assert len(ran) == 12 * 5 * 2
    assert set(ran.values()) == {1}
    summed = totals(reaped)
    assert (summed["advanced"], summed["completed"], summed["superseded"]) == (48, 12, 0)


# -- R3/R4 exact under concurrency ------------------------------------------------------------


#: tests.w5.flaky's runs: which passes fail on their first attempt, which on every one.
FLAKY_KINDS = {
    "clean": {"passes": 4},
    "once": {"passes": 4, "fail_once": [0, 2]},
    "spent": {"passes": 4, "fail_once": [0], "fail_always": [2]},
}


def test_w5_r4_attempts_and_counters_are_exact_under_concurrency():
    """W5 + R3/R4: sixteen runs of ``tests.w5.flaky`` (three attempts, 50 ms back-off),
    whose passes count and some fail deterministically, drained by two ``--concurrency
    4`` workers with ``--max-passes 2``. Every attempt ran exactly once; a run whose
    pass failed once and then passed is done with exactly the counts its committed
    passes made; a run whose pass failed three times is failed with ``attempts == 3``
    and the counts of the passes before it. The workers' reports count every pass."""
    job = "tests.w5.flaky"
    kinds = ["clean"] * 4 + ["once"] * 8 + ["spent"] * 4
    runs = {
        start(job, FLAKY_KINDS[kind], instance=f"f{n:02}").run.pk: kind
        for n, kind in enumerate(kinds)
    }
    fleet = workers(2, "--max-passes", "2", "--job", job)
    try:
        wait_until_settled(job, len(runs), fleet)
    finally:
        reaped = stop_all(fleet)
    assert [code for code, _out, _err in reaped] == [0, 0], [err for *_, err in reaped]

    invoked = defaultdict(list)
    for run_id, name in Effect.objects.filter(run_id__in=runs).values_list("run_id", "name"):
        invoked[run_id].append(name)
    expected_attempts = {
        "clean": ["0@1", "1@1", "2@1", "3@1"],
        "once": ["0@1", "0@2", "1@1", "2@1", "2@2", "3@1"],
        "spent": ["0@1", "0@2", "1@1", "2@1", "2@2", "2@3"],
    }
    for run in Run.objects.filter(pk__in=runs):
        kind = runs[run.pk]
        assert sorted(invoked[run.pk]) == expected_attempts[kind], (kind, run.pk)
        if kind == "spent":
            assert (run.status, run.attempts, run.failure_code) == (
                RunStatus.FAILED,
                3,
                "handler_failed",
            )
            assert "RuntimeError: pass 2 fails on attempt 3" in run.last_error
            assert run.decoded_counters().value == {"passes": 2, "items": 1 + 2}
            assert run.decoded_cursor().value == 2
            assert run.ended_at is not None
            assert run.live_key is None
        else:
            assert (run.status, run.attempts, run.failure_code, run.last_error) == (
                RunStatus.DONE,
                0,
                "",
                "",
            )
            assert run.decoded_counters().value == {"passes": 4, "items": 1 + 2 + 3 + 4}
    summed = totals(reaped)
    # Retries: 2 per "once" run; 3 per "spent" run (pass 0 once, pass 2 twice).
    assert (summed["retrying"], summed["failed"], summed["completed"]) == (8 * 2 + 4 * 3, 4, 12)
    assert (summed["advanced"], summed["superseded"]) == (12 * 3 + 4 * 2, 0)
    assert len(summed["errors"]) == summed["retrying"] + summed["failed"]


# -- SQLite's write lock ---------------------------------------------------------------------


def test_w5_sqlite_passes_wait_for_the_write_lock_and_none_fails_for_it():
    """W5 on SQLite: two ``--concurrency 4`` workers, 24 runs of two passes of four steps,
    every step and pass writing rows. A pass waiting for SQLite's write lock waits
    (``OPTIONS["timeout"]``): no run retried, failed or lost for "database is locked",
    no drive error, every step once. (On PostgreSQL and MariaDB the same holds.)"""
    job = "tests.counted_walk"
    payload = {"passes": 2, "steps": 4, "sleep": 0}
    fleet = workers(2, "--job", job)
    try:
        ready(fleet)  # both write from the first run on
        runs = [start(job, payload, instance=f"s{n:02}").run.pk for n in range(24)]
        wait_until_settled(job, len(runs), fleet)
    finally:
        reaped = stop_all(fleet)
    assert [code for code, _out, _err in reaped] == [0, 0], [err for *_, err in reaped]
    for _code, _out, err in reaped:
        assert "locked" not in err, err
    summed = totals(reaped)
    assert summed["errors"] == []
    assert summed["aborted"] == []
    assert (summed["retrying"], summed["failed"], summed["superseded"]) == (0, 0, 0)
    assert (summed["advanced"], summed["completed"]) == (24, 24)
    finished = Run.objects.filter(pk__in=runs)
    assert set(finished.values_list("status", "attempts", "failure_code")) == {
        (RunStatus.DONE, 0, "")
    }
    assert not finished.filter(last_error__icontains="locked").exists()
    ran = Counter(Effect.objects.filter(run_id__in=runs).values_list("run_id", "name"))
    assert len(ran) == 24 * 2 * 4
    assert set(ran.values()) == {1}


# -- refused before anything is driven -------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "4"])
def test_w5_run_due_jobs_refuses_a_concurrency_that_is_not_a_positive_int(value):
    run = fresh(start("tests.noop").run)
    with pytest.raises(ValueError, match="concurrency"):
        run_due_jobs(jobs=["tests.noop"], concurrency=value)
    after = fresh(run)
    assert (after.status, after.lease_owner, after.updated_at) == (
        RunStatus.RUNNING,
        None,
        run.updated_at,
    )


@pytest.mark.parametrize("value", [0, -1, "4", True, 1.5])
def test_w5_run_due_jobs_refuses_a_bad_concurrency_setting(settings, value):
    settings.LEASEJOBS = {"CONCURRENCY": value}
    run = fresh(start("tests.noop").run)
    with pytest.raises(ValueError, match="concurrency"):
        run_due_jobs(jobs=["tests.noop"])
    assert fresh(run).updated_at == run.updated_at


def test_w5_run_due_jobs_with_threads_refuses_to_run_inside_a_transaction():
    """W5: the passes write on connections of their own, which cannot see the caller's
    transaction: ``run_due_jobs(concurrency=4)`` inside one is refused, before anything
    is driven, and says why; the same call outside drives the run."""
    run = fresh(start("tests.noop").run)
    with transaction.atomic(), pytest.raises(TransactionManagementError, match="outside one"):
        run_due_jobs(jobs=["tests.noop"], concurrency=4)
    after = fresh(run)
    assert (after.status, after.lease_owner, after.attempts, after.updated_at) == (
        RunStatus.RUNNING,
        None,
        0,
        run.updated_at,
    )
    assert run_due_jobs(jobs=["tests.noop"], concurrency=4).completed == 1
    assert fresh(run).status == RunStatus.DONE
