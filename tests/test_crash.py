"""R5 + L3 with a real crash: a worker SIGKILLed between two steps.

The step completed before the kill is not run again on resume; the takeover
charges the interrupted pass exactly one attempt.
"""

from __future__ import annotations

import time

import pytest

from django_leasejobs import RunStatus, release, run_due_jobs, start
from django_leasejobs.clock import DatabaseClock
from django_leasejobs.models import Run, Step
from django_leasejobs.signals import run_held
from tests.models import Effect
from tests.processes import python
from tests.utils import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]

WAIT = 60
JOB = "tests.killed_between_steps"


def kill_inside_step_two(job, run):
    """Drive *job* in a worker process and SIGKILL it once step one is recorded."""
    worker = python(f"from django_leasejobs import run_due_jobs; run_due_jobs(jobs=[{job!r}])")
    try:
        wait_for(
            lambda: Step.objects.filter(run=run, name="one", result__isnull=False).exists(),
            "step one to be recorded",
        )
        assert worker.poll() is None, "the worker should be inside step two"
    finally:
        worker.kill()  # SIGKILL: no cleanup, no outcome written
        worker.communicate(timeout=WAIT)


def test_r5_a_step_completed_before_the_worker_was_killed_is_not_rerun():
    run = start(JOB).run
    kill_inside_step_two(JOB, run)

    crashed = Run.objects.get(pk=run.pk)
    assert crashed.status == RunStatus.RUNNING
    assert crashed.lease_began_at is not None  # a begun pass that never reported
    assert crashed.attempts == 0
    assert Effect.objects.filter(run_id=run.pk, name="one").count() == 1

    # Its one-second lease expires on the database's clock; then a drive takes over.
    clock = DatabaseClock()
    wait_for(lambda: Run.objects.due(clock.now_expr()).filter(pk=run.pk).exists(), "expiry", WAIT)
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


def test_l3_a_job_not_safe_to_repeat_is_held_after_a_kill_and_resumed_only_by_release():
    job = "tests.unrepeatable"
    held_signals = []

    def on_held(sender, run, **kwargs):
        held_signals.append(run.pk)

    run_held.connect(on_held)
    try:
        check_held_then_released(job, held_signals)
    finally:
        run_held.disconnect(on_held)


def check_held_then_released(job, held_signals):
    run = start(job).run
    kill_inside_step_two(job, run)
    invocations = Effect.objects.filter(run_id=run.pk, name__startswith="invoked")
    assert invocations.count() == 1

    # The killer's pid is gone, so this host's next drive takes over at once (L9).
    report = run_due_jobs(jobs=[job])
    assert report.held == 1
    held = Run.objects.get(pk=run.pk)
    assert held.status == RunStatus.HELD
    assert held.failure_code == "interrupted"
    assert held_signals == [run.pk]
    assert invocations.count() == 1  # not re-invoked

    time.sleep(1.5)  # past its one-second lease: still nothing runs it
    assert run_due_jobs(jobs=[job]).attempted == 0
    assert invocations.count() == 1

    assert release(run.pk, resume=True, by="ops")
    assert run_due_jobs(jobs=[job]).completed == 1
    assert list(invocations.order_by("name").values_list("name", flat=True)) == [
        "invoked@1",
        "invoked@2",
    ]
    assert Effect.objects.filter(run_id=run.pk, name="one").count() == 1  # step one kept
    assert Run.objects.get(pk=run.pk).status == RunStatus.DONE
