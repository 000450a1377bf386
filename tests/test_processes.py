"""The suite's own promise: every process a test starts is ended by that test (STYLE).

``tests/conftest.py``'s autouse fixture ends what ``tests/processes.py`` started,
whether or not the test got as far as its own ``finally``; and if pytest itself
dies, the watchdog (``tests/watchdog.py``) ends what is left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests import watchdog
from tests.processes import django_command, end_started, spawned, started
from tests.test_concurrency import ready
from tests.utils import wait_for


@pytest.mark.django_db(transaction=True)
@pytest.mark.concurrency
def test_a_worker_a_test_left_running_is_ended_and_reaped_by_its_teardown():
    worker = django_command("rundueJobs", "--loop", "--interval", "0.1", "--job", "tests.noop")
    ready([worker])  # its loop runs: what a test that then fails would leave behind
    assert started == [worker]
    assert end_started() == [worker]  # what the teardown does
    assert worker.returncode is not None  # ended and reaped
    assert started == []


def _probe(test: str, pids: Path) -> subprocess.Popen:
    """A pytest of its own running one probe (``tests/watchdog_probe.py``), unmarked: it
    starts its own watchdog, as a pytest run from a shell does."""
    env = {key: value for key, value in os.environ.items() if key != watchdog.MARK}
    env["LEASEJOBS_PROBE_PIDS"] = str(pids)
    env["TOX_ENV_NAME"] = f"{env.get('TOX_ENV_NAME', 'local')}-probe"  # a test database of its own
    return spawned(
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-q",
                f"tests/watchdog_probe.py::{test}",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    )


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.concurrency
def test_a_failing_process_test_leaves_no_worker_after_its_pytest_exits(tmp_path):
    pids = tmp_path / "pids"
    probe = _probe("test_probe_fails_with_a_worker_running", pids)
    out, _ = probe.communicate(timeout=300)
    assert "deliberately" in out, out
    assert "1 failed" in out, out
    (pid,) = map(int, pids.read_text().split())
    assert not _alive(pid)


@pytest.mark.concurrency
def test_a_killed_pytest_leaves_no_worker_behind(tmp_path):
    """SIGKILL runs no teardown: the watchdog ends the worker once pytest is gone."""
    pids = tmp_path / "pids"
    probe = _probe("test_probe_hangs_with_a_worker_running", pids)
    wait_for(lambda: pids.exists() and pids.read_text().strip(), "the probe's worker", 300)
    (pid,) = map(int, pids.read_text().split())
    try:
        assert _alive(pid)
        probe.kill()
        probe.wait()
        wait_for(lambda: not _alive(pid), "the worker to be ended by the watchdog", 60)
    finally:
        if _alive(pid):  # the watchdog failed: this test still ends what it caused
            os.kill(pid, signal.SIGKILL)
