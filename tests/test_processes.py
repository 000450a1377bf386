"""The suite's own promise: every process a test starts is ended by that test (STYLE).

``tests/conftest.py``'s autouse fixture ends what ``tests/processes.py`` started,
whether or not the test got as far as its own ``finally``.
"""

from __future__ import annotations

import pytest

from tests.processes import django_command, end_started, started
from tests.test_concurrency import ready


@pytest.mark.django_db(transaction=True)
@pytest.mark.concurrency
def test_a_worker_a_test_left_running_is_ended_and_reaped_by_its_teardown():
    worker = django_command("rundueJobs", "--loop", "--interval", "0.1", "--job", "tests.noop")
    ready([worker])  # its loop runs: what a test that then fails would leave behind
    assert started == [worker]
    assert end_started() == [worker]  # what the teardown does
    assert worker.returncode is not None  # ended and reaped
    assert started == []
