"""Django tasks (SPEC §9) in real ``rundueJobs --loop`` workers: crash, heartbeat, timeout.

Each worker is its own ``python -m django rundueJobs`` process on the test
database, given the backend's ``OPTIONS`` through ``LEASEJOBS_TEST_TASK_OPTIONS``
(tests/settings.py); the built-in job's lease is the ``LEASE`` it started with.
The task, ``tests.tasks.marked_nap``, marks each attempt's start and end as an
``Effect`` holding the worker's pid, so a test knows which process to kill and
what really ran. A killed worker is reaped at once: its pid is then provably
gone, so a worker on this host may release its lease before it expires (L9);
either way the survivor's claim is a takeover (L3).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from django_leasejobs import RunStatus
from django_leasejobs.compat import TaskResultStatus
from django_leasejobs.models import Run, TaskAttempt
from django_leasejobs.tasks import TASK_JOB
from tests.models import Effect
from tests.processes import command_env, spawned
from tests.tasks import marked_nap
from tests.utils import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]

WAIT = 60  # seconds: the longest any wait below may take before the test fails
ABANDONED = "django_leasejobs.exceptions.PassAbandoned"
TIMED_OUT = "django_leasejobs.exceptions.PassTimedOut"
#: Seconds the timeout test's first attempt naps if never taken over: twice WAIT, so that
#: an attempt 2 seen within WAIT began while attempt 1 still napped, however busy the machine.
NAP = 2 * WAIT
FINISHED = {TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED}


class Worker:
    """One ``rundueJobs --loop`` process driving task runs, its output in a file."""

    def __init__(self, log: Path, options: dict[str, object]) -> None:
        self.log = log
        env = command_env(LEASEJOBS_TEST_TASK_OPTIONS=json.dumps(options))
        command = ["rundueJobs", "--job", TASK_JOB, "--loop", "--interval", "0.1"]
        with log.open("w") as out:
            self.process = spawned(  # ended by the test's teardown, whatever happened
                subprocess.Popen(
                    [sys.executable, "-m", "django", *command],
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        return self.log.read_text()

    def kill(self) -> None:
        """SIGKILL: no cleanup, no outcome written; reaped, so its pid is gone (L9)."""
        self.process.kill()
        self.process.wait(timeout=WAIT)

    def stop(self) -> str:
        """SIGTERM: stop after the pass in flight; the worker's whole output."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=WAIT)
        assert self.process.returncode == 0, self.output()
        return self.output()


@pytest.fixture
def workers(tmp_path):
    """Start task workers: ``workers(options, count)``; any still running is killed after."""
    started: list[Worker] = []

    def start(options: dict[str, object], count: int) -> list[Worker]:
        new = [Worker(tmp_path / f"worker{len(started) + n}.log", options) for n in range(count)]
        started.extend(new)
        return new

    yield start
    for worker in started:  # before the test database is flushed
        if worker.process.poll() is None:
            worker.kill()


def marks(result) -> list[str]:
    """The task's ``start@n`` / ``end@n`` marks, in the order they were written."""
    return list(
        Effect.objects.filter(run_id=result.id).order_by("pk").values_list("name", flat=True)
    )


def started(result, attempt: int, seconds: float = WAIT) -> Effect:
    """The mark of attempt *attempt*'s start, once the task has written it."""
    name = f"start@{attempt}"
    return wait_for(
        lambda: Effect.objects.filter(run_id=result.id, name=name).first(),
        f"attempt {attempt} of the task to start",
        seconds,
    )


def kill_the_one_running(result, pool: list[Worker]) -> tuple[Worker, list[Worker]]:
    """SIGKILL the worker inside attempt 1 of *result*; (the killed one, the survivors)."""
    pid = started(result, 1).pid
    (victim,) = [worker for worker in pool if worker.pid == pid]
    assert victim.process.poll() is None, victim.output()
    victim.kill()
    return victim, [worker for worker in pool if worker is not victim]


def outcome(result):
    """The task's result, once it has finished."""

    def finished():
        now = marked_nap.get_result(result.id)
        return now if now.status in FINISHED else None

    return wait_for(finished, "the task to finish")


def pid_of(worker_id: str) -> int:
    """The pid in a ``host:pid:start`` worker id."""
    return int(worker_id.rsplit(":", 2)[1])


def error_classes(result) -> list[str]:
    return [error.exception_class_path for error in result.errors]


def _takeover(workers, options, naps):
    """Enqueue the task, start two workers, SIGKILL the one that begins it."""
    result = marked_nap.enqueue(naps)
    victim, survivors = kill_the_one_running(result, workers(options, 2))
    return result, victim, survivors


def test_l3_a_killed_task_with_attempts_left_is_taken_over_by_another_worker(workers):
    options = {"RETRY": {"max_attempts": 2}, "LEASE": 1}
    # Attempt 1 naps until it is killed; the replay returns at once.
    result, victim, (survivor,) = _takeover(workers, options, [WAIT, 0])

    final = outcome(result)
    survivor.stop()
    assert final.status == TaskResultStatus.SUCCESSFUL, error_classes(final)
    assert final.return_value == 2  # the replay was attempt 2
    assert [pid_of(worker_id) for worker_id in final.worker_ids] == [victim.pid, survivor.pid]
    assert final.attempts == 2
    assert error_classes(final) == [ABANDONED]  # the attempt the crash cut short
    assert marks(result) == ["start@1", "start@2", "end@2"]
    run = Run.objects.get(pk=result.id)
    assert (run.status, run.attempts, run.failure_code) == (RunStatus.DONE, 0, "")


def test_l3_a_killed_task_on_the_default_single_attempt_fails_without_running_again(workers):
    result, victim, (survivor,) = _takeover(workers, {"LEASE": 1}, [WAIT])

    final = outcome(result)
    survivor.stop()
    assert final.status == TaskResultStatus.FAILED
    assert [pid_of(worker_id) for worker_id in final.worker_ids] == [victim.pid]
    assert error_classes(final) == [ABANDONED]
    assert marks(result) == ["start@1"]  # the takeover charged it; nothing called it again
    run = Run.objects.get(pk=result.id)
    assert (run.status, run.failure_code) == (RunStatus.FAILED, "lease_expired")


def test_l3_a_killed_task_not_safe_to_repeat_is_held_and_stays_ready(workers):
    options = {"RETRY": {"max_attempts": 2}, "LEASE": 1, "SAFE_TO_REPEAT": False}
    result, victim, (survivor,) = _takeover(workers, options, [WAIT, 0])

    wait_for(
        lambda: Run.objects.filter(pk=result.id, status=RunStatus.HELD).exists(),
        "the run to be held",
    )
    time.sleep(1.5)  # past its one-second lease, the survivor still polling: nothing runs it
    survivor.stop()
    held = marked_nap.get_result(result.id)
    assert held.status == TaskResultStatus.READY  # a held run is live
    assert [pid_of(worker_id) for worker_id in held.worker_ids] == [victim.pid]
    assert error_classes(held) == [ABANDONED]
    assert marks(result) == ["start@1"]
    run = Run.objects.get(pk=result.id)
    assert (run.status, run.failure_code) == (RunStatus.HELD, "interrupted")


def test_l10_a_task_napping_through_three_leases_is_never_run_twice(workers):
    result = marked_nap.enqueue([3.5])  # more than three of its one-second leases
    pool = workers({"LEASE": 1}, 3)  # one runs it, two would take it over if they could

    final = outcome(result)
    outputs = [worker.stop() for worker in pool]
    assert final.status == TaskResultStatus.SUCCESSFUL, error_classes(final)
    assert final.attempts == 1
    assert final.errors == []
    assert TaskAttempt.objects.filter(run_id=result.id).count() == 1
    assert marks(result) == ["start@1", "end@1"]
    completed = sum(int(n) for out in outputs for n in re.findall(r"\bcompleted=(\d+)", out))
    assert completed == 1, outputs
    run = Run.objects.get(pk=result.id)
    assert (run.status, run.attempts, run.failure_code) == (RunStatus.DONE, 0, "")


def test_l10_r10_past_its_timeout_a_napping_task_is_taken_over_while_it_still_naps(workers):
    options = {"RETRY": {"max_attempts": 2}, "LEASE": 1, "TIMEOUT": 1}
    # Attempt 1 naps until attempt 2 has started (at most NAP s): its heartbeat
    # must stop renewing after the one-second timeout for that ever to happen.
    result = marked_nap.enqueue([NAP, 0], wake_on=2)
    pool = workers(options, 2)
    first = next(worker for worker in pool if worker.pid == started(result, 1).pid)
    second = next(worker for worker in pool if worker is not first)

    started(result, 2, seconds=WAIT)  # not after attempt 1 woke by itself
    wait_for(lambda: "superseded=1" in first.output(), "the late return to be refused")
    final = outcome(result)
    for worker in pool:
        worker.stop()
    assert final.status == TaskResultStatus.SUCCESSFUL, error_classes(final)
    assert final.return_value == 2
    assert [pid_of(worker_id) for worker_id in final.worker_ids] == [first.pid, second.pid]
    # Attempt 2 started while attempt 1 still napped; attempt 1 then returned,
    # too late to count: its attempt records the timeout, and its outcome
    # wrote nothing (superseded, L6).
    order = marks(result)
    assert order.index("start@2") < order.index("end@1"), order
    assert error_classes(final) == [TIMED_OUT]
    run = Run.objects.get(pk=result.id)
    assert (run.status, run.attempts, run.failure_code) == (RunStatus.DONE, 0, "")
