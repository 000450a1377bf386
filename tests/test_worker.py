"""The --loop worker in production conditions: stopping, and outliving its database."""

from __future__ import annotations

import logging
import signal
import subprocess

import pytest
from django.db import OperationalError

from django_leasejobs import RunStatus, start
from django_leasejobs.driver import DriveReport
from django_leasejobs.models import Run, Step
from django_leasejobs.worker import Worker
from tests.models import Effect
from tests.processes import Lines, django_command
from tests.utils import wait_for

WAIT = 60


def _signalled_out(worker) -> bool:
    """SIGTERM *worker* once more; whether it exited within a second (pacing the resends)."""
    worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(1)
    except subprocess.TimeoutExpired:
        return False
    return True


def wait_until_started(worker, run):
    started = Effect.objects.filter(run_id=run.pk, name="started")
    wait_for(started.exists, "the worker to start the pass", worker=worker)


@pytest.mark.django_db(transaction=True)
@pytest.mark.concurrency
def test_stop_timeout_releases_the_pass_at_its_next_step_boundary_uncharged():
    run = start("tests.stepwise", {"steps": 50, "step_seconds": 0.2}).run
    worker = django_command(
        "rundueJobs",
        "--loop",
        "--interval",
        "0.2",
        "--stop-timeout",
        "0.5",
        "--job",
        "tests.stepwise",
    )
    try:
        # A step recorded before the signal: whatever the machine's load, the pass has
        # done something to keep when its stop-timeout runs out.
        recorded = Step.objects.filter(run=run, result__isnull=False)
        wait_for(recorded.exists, "a step recorded", worker=worker)
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=WAIT)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 0, err
    assert "deferred=1" in out, err
    released = Run.objects.get(pk=run.pk)
    assert released.status == RunStatus.RUNNING
    assert released.lease_owner is None  # handed back, not left to expire
    assert released.lease_began_at is None  # so the next claim charges nothing
    assert released.attempts == 0
    recorded = Step.objects.filter(run=run, result__isnull=False).count()
    assert 0 < recorded < 50  # stopped early, and what it did is kept for the next pass


@pytest.mark.django_db(transaction=True)
@pytest.mark.concurrency
def test_a_second_signal_exits_at_once_and_leaves_the_lease_to_expire():
    # A step of ten minutes: only the second signal explains an exit within WAIT.
    run = start("tests.stepwise", {"steps": 1, "step_seconds": 600}).run
    worker = django_command(  # -v 2: the first signal is logged as it is handled
        "rundueJobs", "--loop", "--interval", "0.2", "--job", "tests.stepwise", "-v", "2"
    )
    said = Lines(worker.stderr)
    try:
        wait_until_started(worker, run)
        worker.send_signal(signal.SIGTERM)
        # Two signals sent before the first was handled would arrive as one (a
        # pending signal is not queued twice): send the second once it was heard.
        said.wait_for(lambda line: "Worker stopping" in line, "the first signal to be heard")
        # The line is logged as the first signal is being handled; a signal that lands
        # before that handling ends is handled inside it, as a first one again. So the
        # later signal is sent until the worker exits: any exit within WAIT is one.
        wait_for(lambda: _signalled_out(worker), "the worker to exit on a later signal")
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 128 + signal.SIGTERM
    held = Run.objects.get(pk=run.pk)
    assert held.lease_owner is not None
    assert held.lease_began_at is not None  # a takeover will charge it, as for any crash


def test_an_outage_is_logged_once_and_the_loop_carries_on(monkeypatch, caplog):
    refused = OperationalError("connection refused\n\tIs the server running on that host?")
    outcomes = [refused] * 3 + [DriveReport()]

    def drive(**kwargs):
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr("django_leasejobs.worker.run_due_jobs", drive)
    monkeypatch.setattr("django_leasejobs.worker.close_old_connections", lambda: None)
    reports = []
    worker = Worker(interval=0, on_report=reports.append)
    with caplog.at_level(logging.INFO, logger="django_leasejobs"):
        results = [worker.drive_once() for _ in range(4)]
    assert results[:3] == [None, None, None]
    assert len(reports) == 1
    errors = [r for r in caplog.records if "could not run" in r.getMessage()]
    assert len(errors) == 1
    assert "connection refused Is the server running on that host?" in errors[0].getMessage()
    assert "\n" not in errors[0].getMessage()  # one line, as the one-shot's stderr (D5)
    assert errors[0].getMessage().endswith("; retrying every 0 s")  # a duration as A8 writes it
    assert sum("reachable again" in r.getMessage() for r in caplog.records) == 1


def test_debug_query_log_is_reset_between_drives(monkeypatch, settings):
    from django.db import connection

    settings.DEBUG = True
    connection.queries_log.append({"sql": "x", "time": "0"})
    monkeypatch.setattr("django_leasejobs.worker.run_due_jobs", lambda **kwargs: DriveReport())
    Worker(interval=0).drive_once()
    assert len(connection.queries_log) == 0
