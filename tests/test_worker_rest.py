"""What a worker does after a drive that found nothing due (SPEC revision 3: W1, W3, D5, W4).

A ``--loop`` worker rests until the earliest time a run it may drive falls
due, or ``--interval``, whichever is first (W1); a one-shot ``--max-seconds``
command waits likewise for a run due within its budget (W3). Both are shown
with real ``rundueJobs`` processes on the test database: the bug they catch
is a worker sleeping the whole interval (or exiting) while runs wait.
"""

from __future__ import annotations

import itertools
import time
from datetime import timedelta

import pytest

from django_leasejobs import RunStatus, start
from django_leasejobs.models import Run
from django_leasejobs.resting import DUE_SLACK, due_in
from tests.models import PassLog
from tests.processes import django_command
from tests.utils import stop_worker, until

pytestmark = pytest.mark.django_db(transaction=True)

#: Generous: what the fixed behaviour does in ~4 s, the old one in 100 s or never.
PATIENCE = 30


def _live(job: str) -> int:
    return Run.objects.filter(job=job, status=RunStatus.RUNNING).count()


# -- the read both rest on -------------------------------------------------------------------


def test_w1_due_in_is_the_earliest_unleased_run_of_the_jobs_driven():
    from django_leasejobs.clock import get_clock

    now = get_clock().now()
    soon = start("tests.noop", instance="soon").run
    later = start("tests.noop", instance="later").run
    leased = start("tests.noop", instance="leased").run
    Run.objects.filter(pk=soon.pk).update(next_attempt_at=now + timedelta(seconds=30))
    Run.objects.filter(pk=later.pk).update(next_attempt_at=now + timedelta(seconds=90))
    # A leased run is not waiting: its expiry moves with its holder's renewals.
    Run.objects.filter(pk=leased.pk).update(
        next_attempt_at=now + timedelta(seconds=5), lease_owner="someone"
    )
    seconds = due_in(jobs=["tests.noop"])
    assert seconds is not None
    assert 20 < seconds <= 30 + DUE_SLACK
    assert due_in(jobs=["tests.walk"]) is None  # no run of that job waits
    assert due_in(jobs=["tests.noop"], queues=["emails"]) is None  # none of that queue


# -- W1: a rate-limited backlog drains at its rate -------------------------------------------


def test_w1_a_rate_limited_backlog_drains_at_its_rate_not_one_begin_per_interval():
    """Rate(5, per=1 s), 20 runs, a plain ``--loop`` (interval 5 s): about 4 s, not 100 s."""
    for n in range(20):
        start("tests.rated.changing", {"sleep": 0}, instance=f"r{n}")
    worker = django_command("rundueJobs", "--loop", "--job", "tests.rated.changing")
    try:
        drained = until(lambda: _live("tests.rated.changing") == 0, PATIENCE)
    finally:
        stop_worker(worker)
    assert drained, f"{20 - _live('tests.rated.changing')} of 20 began in {PATIENCE} s"
    begins = sorted(PassLog.objects.values_list("started_ns", flat=True))
    # C3 still holds: begins at least per / n apart (a little slack for the clocks).
    gaps = [(b - a) / 1e9 for a, b in itertools.pairwise(begins)]
    assert min(gaps) > 0.15, gaps


def test_w1_workers_that_outnumber_a_concurrency_limit_take_the_slot_as_it_frees():
    """Limit(concurrency=2), three workers, 12 passes of 0.3 s: drained in slot time."""
    for n in range(12):
        start("tests.limited.workers", {"sleep": 0.3}, instance=f"c{n}")
    workers = [
        django_command("rundueJobs", "--loop", "--job", "tests.limited.workers") for _ in range(3)
    ]
    try:
        # 12 passes x 0.3 s over two slots is ~2 s (~5 s with the workers' start-up,
        # measured); workers asleep for their 5 s interval after each throttle took 28 s.
        drained = until(lambda: _live("tests.limited.workers") == 0, seconds=15)
    finally:
        for worker in workers:
            stop_worker(worker)
    assert drained


# -- W3: the one-shot waits for a run due within its budget ----------------------------------


def test_w3_max_seconds_waits_for_a_retry_due_within_the_budget():
    run = start("tests.fails_once", instance="retry").run
    command = django_command("rundueJobs", "--max-seconds", "20", "--job", "tests.fails_once")
    out, err = command.communicate(timeout=120)
    assert command.returncode == 0, err
    assert Run.objects.get(pk=run.pk).status == RunStatus.DONE, out
    for count in ("attempted=2", "completed=1", "retrying=1"):
        assert count in out, out


def test_w3_max_seconds_drains_a_rate_limited_backlog_at_its_rate():
    for n in range(10):
        start("tests.rated.changing", {"sleep": 0}, instance=f"m{n}")
    command = django_command(
        "rundueJobs", "--max-seconds", "20", "--job", "tests.rated.changing", "--json"
    )
    out, err = command.communicate(timeout=120)
    assert command.returncode == 0, err
    assert _live("tests.rated.changing") == 0, out
    assert '"completed": 10' in out


def test_w3_max_seconds_does_not_wait_for_a_run_due_after_the_budget():
    from django_leasejobs.clock import get_clock

    run = start("tests.noop", instance="later").run
    Run.objects.filter(pk=run.pk).update(next_attempt_at=get_clock().now() + timedelta(minutes=10))
    began = time.monotonic()
    command = django_command("rundueJobs", "--max-seconds", "30", "--job", "tests.noop")
    _out, err = command.communicate(timeout=120)
    assert command.returncode == 0, err
    # Exits at its first idle drive, well before its 30 s (process start-up included).
    assert time.monotonic() - began < 20
    assert Run.objects.get(pk=run.pk).status == RunStatus.RUNNING


# -- D5: an idle loop is quiet ---------------------------------------------------------------


def test_d5_an_idle_loop_prints_nothing_at_the_default_verbosity():
    start("tests.noop", instance="one")
    worker = django_command("rundueJobs", "--loop", "--interval", "0.1", "--job", "tests.noop")
    time.sleep(3)  # some thirty idle drives after the first
    out, _err = stop_worker(worker)
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1, out  # the drive that did something
    assert "completed=1" in lines[0]


def test_d5_verbosity_2_prints_every_drive_of_a_loop():
    worker = django_command(
        "rundueJobs", "--loop", "--interval", "0.1", "--job", "tests.noop", "-v", "2"
    )
    time.sleep(3)
    out, _err = stop_worker(worker)
    assert out.count("attempted=0") >= 3, out


# -- W4: a queue nobody names gets a warning -------------------------------------------------


@pytest.mark.parametrize(
    ("queue", "warned"), [("nosuch", True), ("default", False), ("emails", False)]
)
def test_w4_a_queue_no_job_or_tasks_alias_names_is_warned_about(queue, warned):
    command = django_command("rundueJobs", "--queue", queue)
    out, err = command.communicate(timeout=120)
    assert command.returncode == 0, err  # still driven: runs may be started with that queue=
    assert "attempted=0" in out
    assert (f"--queue {queue!r}" in err) is warned, err
