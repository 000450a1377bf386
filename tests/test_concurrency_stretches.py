"""W5 with §13: a job's short passes go to a pool thread as a *stretch* it claims itself.

At ``concurrency=N`` the dispatcher hands the runs of a job whose passes are
known to be short to a thread a few in a row; the thread claims them in one
statement on its own connection and drives them in turn, as a drive at
``concurrency=1`` drives its claims made ahead. These tests hold that path to
the same rules: each run claimed under its own token (L6), what is not
reached given back uncharged (L2), a claim that went elsewhere neither
driven nor counted, and runs behind a long pass not kept waiting (§13).

The worker's monotonic clock is frozen (``worker_clock``) where a test needs
the passes to look short whatever the machine's speed.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from django_leasejobs import RunStatus, claims_ahead, run_due_jobs, signals, start, start_many
from django_leasejobs import driver as driver_module
from django_leasejobs.due import DriveOptions, DueKey
from django_leasejobs.handed import Unclaimed, run_stretch
from django_leasejobs.models import Run
from django_leasejobs.pacing import BATCH_MAX, STRETCH_MAX, pace
from tests.models import PassLog
from tests.processes import django_command
from tests.utils import fresh, stop_worker, wait_for, waited_out

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = timedelta(seconds=60)


def _learn(spec, drive):
    """One pass of *spec*, so this process knows its passes are short."""
    start(spec, instance="first")
    assert drive(spec).completed == 1
    assert pace.batch(spec) == BATCH_MAX


def _counting(define, drive, name):
    """A no-op job whose passes are known short, and the ids of the runs it began since."""
    began: list[str] = []

    def handler(p):
        began.append(p.run.id)
        return p.done()

    spec = define(name, handler, lease=LEASE)
    _learn(spec, drive)
    began.clear()
    return spec, began


@pytest.fixture
def claims_made(monkeypatch):
    """Each claim made ahead, as (the thread that made it, how many runs it asked for)."""
    made: list[tuple[str, int]] = []
    claim_ahead = claims_ahead.claim_ahead

    def recorded(run_ids, lease, holder):
        made.append((threading.current_thread().name, len(run_ids)))
        return claim_ahead(run_ids, lease, holder)

    monkeypatch.setattr(claims_ahead, "claim_ahead", recorded)
    return made


def test_w5_s13_short_passes_are_claimed_a_stretch_at_a_time_on_the_pool_threads(
    define, drive, worker_clock, claims_made
):
    seen: dict[str, tuple[str, str]] = {}

    def handler(p):
        owner = Run.objects.values_list("lease_owner", flat=True).get(pk=p.run.id)
        seen[p.run.id] = (threading.current_thread().name, owner)
        return p.done()

    spec = define("t.stretch.noop", handler, lease=LEASE)
    _learn(spec, drive)
    seen.clear()
    claims_made.clear()
    runs = [start(spec, instance=f"r{n:02}").run for n in range(4 * BATCH_MAX)]
    report = run_due_jobs(jobs=[spec.name], concurrency=4, limit=len(runs))
    assert report.completed == len(runs)
    assert report.errors == []
    assert {fresh(run).status for run in runs} == {RunStatus.DONE}
    assert {fresh(run).attempts for run in runs} == {0}
    assert sorted(seen) == sorted(run.pk for run in runs)  # each driven once
    assert len({owner for _thread, owner in seen.values()}) == len(runs)  # a token each (L6)
    assert {thread for thread, _owner in seen.values()} <= {
        f"leasejobs-pass-{n}" for n in range(1, 5)
    }
    # Claimed by the threads that drove them, several runs a statement: none by the dispatcher.
    assert claims_made, "no run was claimed ahead"
    assert all(thread.startswith("leasejobs-pass-") for thread, _size in claims_made)
    assert sum(size for _thread, size in claims_made) == len(runs)
    assert all(1 < size <= STRETCH_MAX for _thread, size in claims_made)
    # The first claim, made with the forty all due, is a fair share: a quarter of them,
    # one for each of the four threads. How the rest are shared depends on which threads
    # are idle when -- on a busy machine one thread may claim twice while another is slow
    # to start -- so only their sizes are asserted.
    assert claims_made[0][1] == len(runs) // 4


def _options(spec, stop=lambda: False) -> DriveOptions:
    """What a stretch reads of its drive."""
    return DriveOptions("default", {spec.name: spec}, max_passes=1, stop=stop)


def test_w5_l2_a_stretch_told_to_stop_begins_no_more_and_gives_the_rest_back(
    define, drive, worker_clock
):
    """The loop a pool thread runs for a stretch (here on the test's thread, so that
    nothing else races the stop): once the drive says stop, no further pass begins,
    and the runs not reached are given back, uncharged."""
    spec, began = _counting(define, drive, "t.stretch.stop")
    runs = [start(spec, instance=f"s{n}").run for n in range(BATCH_MAX)]
    keys = [DueKey(run.pk, spec.name, took_over=False) for run in runs]
    ran = run_stretch(_options(spec, stop=lambda: len(began) >= 2), keys, spec, Unclaimed())
    assert began == [run.pk for run in runs[:2]]  # stopped after two passes of ten
    assert [len(one.outcomes) for one in ran] == [1, 1] + [0] * (BATCH_MAX - 2)
    assert all(one.skipped for one in ran[2:])
    for run in runs[2:]:
        stored = fresh(run)
        assert stored.status == RunStatus.RUNNING
        assert stored.lease_owner is None  # given back ...
        assert stored.lease_began_at is None
        assert stored.attempts == 0  # ... uncharged (L2: a claim never begun costs nothing)
        assert stored.admission_misses is None
    assert run_due_jobs(jobs=[spec.name], concurrency=4).completed == BATCH_MAX - 2


def test_w5_l4_a_stretch_stopped_after_a_finish_that_began_the_next_run_drives_that_run(
    define, drive, worker_clock
):
    """Each finish of a stretch carries the next run's BEGIN (§13). A stop that comes
    after that finish -- its receiver asks for it -- finds the next pass begun: it is
    in flight, so it is driven; nothing after it begins, and the rest go back."""
    spec, began = _counting(define, drive, "t.stretch.carried")
    runs = [start(spec, instance=f"c{n}").run for n in range(BATCH_MAX)]
    keys = [DueKey(run.pk, spec.name, took_over=False) for run in runs]
    stopping: list[bool] = []

    def receiver(**kwargs):
        stopping.append(True)

    signals.run_completed.connect(receiver, weak=False)
    try:
        ran = run_stretch(_options(spec, stop=lambda: bool(stopping)), keys, spec, Unclaimed())
    finally:
        signals.run_completed.disconnect(receiver)
    assert began == [run.pk for run in runs[:2]]  # the first, and the one its finish began
    assert [len(one.outcomes) for one in ran] == [1, 1] + [0] * (BATCH_MAX - 2)
    assert {fresh(run).status for run in runs[:2]} == {RunStatus.DONE}
    for run in runs[2:]:
        stored = fresh(run)
        assert (stored.lease_owner, stored.lease_began_at, stored.attempts) == (None, None, 0)


def test_w5_sigterm_in_a_drain_of_short_passes_finishes_what_began_and_gives_the_rest_back():
    """SIGTERM to a ``--concurrency 4`` worker in the middle of a backlog of short
    passes, which its threads drive as stretches: every pass that began ended and
    its run is done; every other run is due, unleased and uncharged (L2)."""
    job = "tests.mostly_quick"
    items = [(f"q{n:04}", {"sleep": 0.002}) for n in range(3000)]
    runs = [result.run.pk for result in start_many(job, items)]
    worker = django_command("rundueJobs", "--loop", "--concurrency", "4", "--job", job)
    try:
        wait_for(lambda: PassLog.objects.count() >= 300, "300 passes")
    finally:
        stop_worker(worker)
    assert worker.returncode == 0
    logs = list(PassLog.objects.all())
    assert all(log.ended_ns for log in logs)  # every pass that began finished
    assert len({log.run_id for log in logs}) == len(logs)  # each once
    done = set(Run.objects.filter(pk__in=runs, status=RunStatus.DONE).values_list("pk", flat=True))
    assert done == {log.run_id for log in logs}
    assert len(done) < len(runs), "the worker drained it all before the signal"
    rest = Run.objects.filter(pk__in=runs).exclude(pk__in=done)
    assert rest.count() == len(runs) - len(done)
    assert set(rest.values_list("status", "lease_owner", "lease_began_at", "attempts")) == {
        (RunStatus.RUNNING, None, None, 0)
    }


def test_w5_l2_runs_of_a_stretch_claimed_by_another_worker_are_neither_driven_nor_counted(
    define, drive, worker_clock, frozen_clock, monkeypatch
):
    spec, began = _counting(define, drive, "t.stretch.stolen")
    runs = [start(spec, instance=f"x{n}").run for n in range(BATCH_MAX)]
    stolen = [run.pk for run in runs[2:5]]
    snapshot = driver_module.snapshot

    def then_stolen(*args):
        keys = snapshot(*args)
        # Another worker claims three of them between this drive's read and its claim.
        later = frozen_clock.now() + LEASE
        Run.objects.filter(pk__in=stolen).update(lease_owner="another", next_attempt_at=later)
        return keys

    monkeypatch.setattr(driver_module, "snapshot", then_stolen)
    report = run_due_jobs(jobs=[spec.name], concurrency=4)
    assert report.completed == report.attempted == BATCH_MAX - 3
    assert report.errors == []
    assert sorted(began) == sorted(run.pk for run in runs if run.pk not in stolen)
    for run_id in stolen:
        stored = Run.objects.get(pk=run_id)
        assert (stored.lease_owner, stored.attempts, stored.status) == (
            "another",
            0,
            RunStatus.RUNNING,
        )


def test_w5_s13_runs_in_a_stretch_behind_a_long_pass_go_to_the_other_threads():
    """One ``--concurrency 4`` worker learns the job's passes are short, then meets a
    long one with runs of its stretch behind it: those are given back (uncharged) and
    driven on the other threads while the long pass runs."""
    job = "tests.mostly_quick"
    quick = {"sleep": 0}
    before = [start(job, quick, instance=f"a{n:02}").run for n in range(12)]
    # Held until the runs behind it are done, for 60 s at most (tests/jobs.py ``_held``).
    slow = start(job, {"sleep": 60, "until_done": "c"}, instance="b-slow").run
    after = [start(job, quick, instance=f"c{n:02}").run for n in range(9)]
    worker = django_command("rundueJobs", "--loop", "--concurrency", "4", "--job", job)
    try:
        wait_for(
            lambda: not Run.objects.filter(job=job, status="running").exists(),
            "every run to end",
            120,
        )
    finally:
        stop_worker(worker)
    assert {fresh(run).status for run in before + after} == {RunStatus.DONE}
    waited = waited_out(slow, after)
    assert not waited, f"{waited} waited out the slow pass"
    assert not Run.objects.filter(pk__in=[r.pk for r in after], attempts__gt=0).exists()
