"""Run only by ``tests/test_processes.py``, in a pytest of its own: not collected otherwise.

``test_probe_fails_with_a_worker_running`` is the test that fails half-way
with a worker running; ``test_probe_hangs_with_a_worker_running`` is the one
whose pytest the outer test kills. Each writes its worker's pid where
``LEASEJOBS_PROBE_PIDS`` says, so the outer test can look for it afterwards.
"""

from __future__ import annotations

import os
import threading

import pytest

from tests.processes import django_command
from tests.test_concurrency import ready


def _worker() -> int:
    worker = django_command("rundueJobs", "--loop", "--interval", "0.1", "--job", "tests.noop")
    ready([worker])
    with open(os.environ["LEASEJOBS_PROBE_PIDS"], "a") as pids:
        pids.write(f"{worker.pid}\n")
    return worker.pid


@pytest.mark.django_db(transaction=True)
def test_probe_fails_with_a_worker_running():
    _worker()
    raise AssertionError("deliberately: a process test that fails half-way")


@pytest.mark.django_db(transaction=True)
def test_probe_hangs_with_a_worker_running():
    _worker()
    threading.Event().wait()  # until the outer test kills this pytest
