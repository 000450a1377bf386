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
from tests.models import Begun
from tests.processes import Lines, django_command
from tests.utils import stop_worker, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

#: The workers' --interval here: a worker that rested it out after a throttle (the bug
#: W1 fixes) would take ten minutes for what W1 drains in seconds, far past any wait below.
LONG_INTERVAL = "600"


def _live(job: str) -> int:
    return Run.objects.filter(job=job, status=RunStatus.RUNNING).count()


# -- the read both rest on -------------------------------------------------------------------


def test_w1_due_in_is_the_earliest_unleased_run_of_the_jobs_driven():
    from django_leasejobs.clock import get_clock

    now = get_clock().now()
    soon = start("tests.noop", instance="soon").run
    later = start("tests.noop", instance="later").run
    leased = start("tests.noop", instance="leased").run
    # Minutes apart, so that however long this test takes to get to due_in() below,
    # its answer tells which run it found.
    Run.objects.filter(pk=soon.pk).update(next_attempt_at=now + timedelta(seconds=600))
    Run.objects.filter(pk=later.pk).update(next_attempt_at=now + timedelta(seconds=1800))
    # A leased run is not waiting: its expiry moves with its holder's renewals.
    Run.objects.filter(pk=leased.pk).update(
        next_attempt_at=now + timedelta(seconds=5), lease_owner="someone"
    )
    seconds = due_in(jobs=["tests.noop"])
    assert seconds is not None
    assert 300 < seconds <= 600 + DUE_SLACK
    assert due_in(jobs=["tests.walk"]) is None  # no run of that job waits
    assert due_in(jobs=["tests.noop"], queues=["emails"]) is None  # none of that queue


def test_w1_w5_a_resting_worker_wakes_when_a_pass_in_flight_ends():
    """``--concurrency 2 --interval 600``: the worker rests while a pass is in flight (its
    run is leased, so the rest's due time cannot see it); the pass ends by deferring its
    run, due again at once and announced to no one (W2 does not notify a Defer). The
    worker drives it again when that pass ends, not ten minutes later."""
    run = start("tests.deferring_slowly", {"until": time.time() + 0.5}).run
    worker = django_command(
        "rundueJobs", "--loop", "--interval", LONG_INTERVAL, "--concurrency", "2",
        "--job", "tests.deferring_slowly",
    )  # fmt: skip
    try:
        wait_for(
            lambda: Run.objects.get(pk=run.pk).status == RunStatus.DONE,
            "the deferred run to be driven again",
            worker=worker,
        )
    finally:
        stop_worker(worker)


# -- W1: a rate-limited backlog drains at its rate -------------------------------------------


def test_w1_a_rate_limited_backlog_drains_at_its_rate_not_one_begin_per_interval():
    """Rate(5, per=1 s), 20 runs, ``--loop --interval 600``: about 4 s, not 19 x 600 s."""
    for n in range(20):
        start("tests.rated.changing", {"sleep": 0, "stamp_begin": True}, instance=f"r{n}")
    worker = django_command(
        "rundueJobs", "--loop", "--interval", LONG_INTERVAL, "--job", "tests.rated.changing"
    )
    try:
        wait_for(lambda: _live("tests.rated.changing") == 0, "20 runs to begin", worker=worker)
    finally:
        stop_worker(worker)
    # C3 still holds: BEGINs, as the database stamped them, at least per / n apart.
    begins = sorted(Begun.objects.values_list("began_at", flat=True))
    assert len(begins) == 20
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(begins)]
    assert min(gaps) > 0.15, gaps


def test_w1_workers_that_outnumber_a_concurrency_limit_take_the_slot_as_it_frees():
    """Limit(concurrency=2), three workers, 12 passes of 0.3 s: drained in slot time."""
    for n in range(12):
        start("tests.limited.workers", {"sleep": 0.3}, instance=f"c{n}")
    workers = [
        django_command(
            "rundueJobs", "--loop", "--interval", LONG_INTERVAL, "--job", "tests.limited.workers"
        )
        for _ in range(3)
    ]
    try:
        # 12 passes x 0.3 s over two slots is ~2 s (~5 s with the workers' start-up,
        # measured); workers asleep for their interval after each throttle would take
        # ten minutes a throttle.
        wait_for(lambda: _live("tests.limited.workers") == 0, "12 passes", worker=workers)
    finally:
        for worker in workers:
            stop_worker(worker)


# -- W3: the one-shot waits for a run due within its budget ----------------------------------


def test_w3_max_seconds_waits_for_a_retry_due_within_the_budget():
    run = start("tests.fails_once", instance="retry").run
    # The budget only bounds the wait: the retry is due 0.2 s after the first attempt.
    command = django_command("rundueJobs", "--max-seconds", "120", "--job", "tests.fails_once")
    out, err = command.communicate(timeout=120)
    assert command.returncode == 0, err
    assert Run.objects.get(pk=run.pk).status == RunStatus.DONE, out
    for count in ("attempted=2", "completed=1", "retrying=1"):
        assert count in out, out


def test_w3_max_seconds_drains_a_rate_limited_backlog_at_its_rate():
    for n in range(10):
        start("tests.rated.changing", {"sleep": 0}, instance=f"m{n}")
    command = django_command(
        "rundueJobs", "--max-seconds", "120", "--job", "tests.rated.changing", "--json"
    )
    out, err = command.communicate(timeout=120)
    assert command.returncode == 0, err
    assert _live("tests.rated.changing") == 0, out
    assert '"completed": 10' in out


def test_w3_max_seconds_does_not_wait_for_a_run_due_after_the_budget():
    from django_leasejobs.clock import get_clock

    run = start("tests.noop", instance="later").run
    Run.objects.filter(pk=run.pk).update(next_attempt_at=get_clock().now() + timedelta(hours=1))
    # A budget of ten minutes: a command that waited for the run, or out its budget,
    # would still be running when communicate() gives up; one that exits at its first
    # idle drive is done in the time a process takes to start.
    command = django_command("rundueJobs", "--max-seconds", "600", "--job", "tests.noop")
    _out, err = command.communicate(timeout=120)
    assert command.returncode == 0, err
    assert Run.objects.get(pk=run.pk).status == RunStatus.RUNNING


# -- D5: an idle loop is quiet ---------------------------------------------------------------


def test_d5_an_idle_loop_prints_nothing_at_the_default_verbosity():
    run = start("tests.noop", instance="one").run
    worker = django_command("rundueJobs", "--loop", "--interval", "0.1", "--job", "tests.noop")
    wait_for(lambda: Run.objects.get(pk=run.pk).status == RunStatus.DONE, "the run", worker=worker)
    # A lower bound on the idle time after the drive that did something (about thirty
    # drives on an idle machine, fewer on a busy one): nothing they print is wanted.
    # The idle drives themselves are counted at -v 2 below.
    time.sleep(3)
    out, _err = stop_worker(worker)
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1, out  # the drive that did something
    assert "completed=1" in lines[0]


def test_d5_verbosity_2_prints_every_drive_of_a_loop():
    worker = django_command(
        "rundueJobs", "--loop", "--interval", "0.1", "--job", "tests.noop", "-v", "2"
    )
    lines = Lines(worker.stdout)
    try:
        lines.wait_for(lambda line: "attempted=0" in line, "three idle drives", count=3)
    finally:
        worker.terminate()
        code = worker.wait(60)
    assert code == 0, lines.seen


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
