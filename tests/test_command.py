"""D5: ``manage.py rundueJobs`` and its alias ``run_due_jobs``."""

from __future__ import annotations

import json
import signal
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command

from django_leasejobs import RunStatus, start
from django_leasejobs.models import Run
from tests.models import Effect
from tests.processes import django_command, refused_usage
from tests.utils import wait_for

WAIT = 60  # seconds a subprocess may take to get somewhere before the test gives up


@pytest.mark.django_db
def test_d5_one_drive_prints_a_summary(capsys):
    run = start("tests.noop").run
    call_command("rundueJobs", "--job", "tests.noop")
    out = capsys.readouterr().out
    assert "attempted=1" in out
    assert "completed=1" in out
    assert Run.objects.get(pk=run.pk).status == RunStatus.DONE


@pytest.mark.django_db
def test_d5_json_report(capsys):
    start("tests.noop")
    call_command("rundueJobs", "--json", "--job", "tests.noop", "--limit", "5", "--max-passes", "2")
    report = json.loads(capsys.readouterr().out)
    assert report["completed"] == 1
    assert report["errors"] == []


@pytest.mark.django_db
def test_d5_the_lowercase_alias_runs_the_same_command(capsys):
    start("tests.noop")
    call_command("run_due_jobs", "--json", "--job", "tests.noop")
    assert json.loads(capsys.readouterr().out)["completed"] == 1


@pytest.mark.django_db
def test_d5_verbosity_zero_prints_nothing(capsys):
    start("tests.noop")
    call_command("rundueJobs", "--job", "tests.noop", verbosity=0)
    assert capsys.readouterr().out == ""


@pytest.mark.django_db
def test_d5_failed_runs_are_data_not_a_command_failure(define, capsys):
    define("t.cmd.fail", lambda p: 1 / 0)
    start("t.cmd.fail")
    call_command("rundueJobs", "--job", "t.cmd.fail", "-v", "2")
    out = capsys.readouterr().out
    assert "retrying=1" in out
    assert "ZeroDivisionError" in out


@pytest.mark.django_db
def test_d5_unknown_job_is_a_command_error_listing_the_jobs():
    with pytest.raises(CommandError, match=r"tests\.noop"):
        call_command("rundueJobs", "--job", "nope")


@pytest.mark.django_db
def test_d5_unknown_job_with_loop_is_refused_before_looping():
    with pytest.raises(CommandError, match=r"tests\.noop"):
        call_command("rundueJobs", "--loop", "--job", "nope")


@pytest.mark.parametrize(
    "args",
    [["--limit", "0"], ["--max-passes", "x"], ["--interval", "-1"], ["--interval", "soon"]],
)
def test_d5_bad_options_are_refused(args):
    with pytest.raises(CommandError):
        call_command("rundueJobs", *args)


@pytest.mark.django_db(transaction=True)
@pytest.mark.concurrency
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_d5_loop_stops_on_sigterm_or_sigint_after_the_pass_in_flight(signum):
    run = start("tests.sleepy", {"seconds": 2}).run
    worker = django_command("rundueJobs", "--loop", "--interval", "0.2", "--job", "tests.sleepy")
    try:
        started = Effect.objects.filter(run_id=run.pk, name="started")
        wait_for(started.exists, "the worker to start the pass", worker=worker)
        worker.send_signal(signum)
        out, err = worker.communicate(timeout=WAIT)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 0, err
    finished = Run.objects.get(pk=run.pk)
    assert finished.status == RunStatus.DONE  # the pass in flight committed
    assert finished.lease_owner is None
    assert "completed=1" in out


@pytest.mark.django_db(transaction=True)
@pytest.mark.concurrency
@pytest.mark.parametrize("value", ["0", "-1", "abc", "1.5"])
def test_w5_a_bad_concurrency_is_refused_in_one_line_and_nothing_is_driven(value):
    """W5, §11: ``--concurrency`` 0, negative or not an int stops the real command before
    anything runs: a non-zero exit, one error line naming the option and the value
    (after argparse's usage block), and a run started before is left as it was."""
    run = Run.objects.get(pk=start("tests.noop").run.pk)
    lines = refused_usage("--concurrency", value, "--job", "tests.noop", timeout=WAIT)
    assert f"argument --concurrency: {value!r}" in lines[-1]
    # Every other line is the usage block.
    assert lines[0].startswith("usage:")
    assert all(line.startswith(" ") for line in lines[1:-1]), lines
    after = Run.objects.get(pk=run.pk)
    assert (after.status, after.lease_owner, after.attempts, after.updated_at) == (
        RunStatus.RUNNING,
        None,
        0,
        run.updated_at,
    )


@pytest.mark.django_db
def test_d5_a_loop_drive_that_only_finds_throttled_or_paused_runs_prints_nothing(
    define, drive, frozen_clock
):
    """A ``--loop`` drive that began nothing, but found runs waiting for their limit (C2)
    or in a paused queue (W6), is as quiet at the default verbosity as an idle one; at
    ``-v 2`` it prints its line, throttled count and all."""
    from io import StringIO

    from django_leasejobs import Limit, pause_queue
    from django_leasejobs.management.commands.rundueJobs import Command
    from tests.limit_helpers import hold_slots

    spec = define("t.cmd.limited", lambda p: p.done(), limit=Limit(concurrency=1))
    for n in range(3):
        start(spec, instance=f"l{n}")
    start(spec, instance="paused", queue="mail")
    pause_queue("mail", by="ops")
    hold_slots(spec.name, 1, until=frozen_clock.now() + timedelta(seconds=10))
    report = drive(spec)
    assert (report.attempted, report.throttled) == (0, 3)
    printed = {}
    for verbosity in (1, 2):
        command = Command(stdout=StringIO())
        command.verbosity, command.as_json = verbosity, False
        command._print_drive(report)
        printed[verbosity] = command.stdout.getvalue()
    assert printed[1] == ""
    assert "throttled=3" in printed[2]
