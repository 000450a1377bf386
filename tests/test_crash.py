"""R5 + L3 with a real crash: a worker SIGKILLed between two steps.

The step completed before the kill is not run again on resume; the takeover
charges the interrupted pass exactly one attempt.
"""

from __future__ import annotations

import time

import pytest

from django_leasejobs import RunStatus, run_due_jobs, start
from django_leasejobs.clock import DatabaseClock
from django_leasejobs.models import Run, Step
from tests.models import Effect
from tests.subprocesses import python

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]

WAIT = 60
JOB = "tests.killed_between_steps"


def wait_for(condition, what):
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def test_r5_a_step_completed_before_the_worker_was_killed_is_not_rerun():
    run = start(JOB).run
    worker = python(f"from django_leasejobs import run_due_jobs; run_due_jobs(jobs=[{JOB!r}])")
    try:
        wait_for(
            lambda: Step.objects.filter(run=run, name="one", result__isnull=False).exists(),
            "step one to be recorded",
        )
        wait_for(lambda: worker.poll() is None, "the worker to be inside step two")
    finally:
        worker.kill()  # SIGKILL: no cleanup, no outcome written
        worker.communicate(timeout=WAIT)

    crashed = Run.objects.get(pk=run.pk)
    assert crashed.status == RunStatus.RUNNING
    assert crashed.lease_began_at is not None  # a begun pass that never reported
    assert crashed.attempts == 0
    assert Effect.objects.filter(run_id=run.pk, name="one").count() == 1

    # Its one-second lease expires on the database's clock; then a drive takes over.
    clock = DatabaseClock()
    wait_for(lambda: Run.objects.due(clock.now_expr()).filter(pk=run.pk).exists(), "expiry")
    report = run_due_jobs(jobs=[JOB])

    assert report.completed == 1
    assert Effect.objects.filter(run_id=run.pk, name="one").count() == 1  # not re-run
    # The replay was attempt 2: the takeover charged the killed pass exactly once.
    assert list(
        Effect.objects.filter(run_id=run.pk).exclude(name="one").values_list("name", flat=True)
    ) == ["two@2"]
    finished = Run.objects.get(pk=run.pk)
    assert finished.status == RunStatus.DONE
    assert not Step.objects.filter(run=run).exists()
