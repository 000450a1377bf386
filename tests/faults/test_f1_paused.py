"""F1: a worker stopped (SIGSTOP) for longer than its passes' leases, then resumed.

A victim worker begins a pass of every run, one per thread, and is stopped
while each pass sleeps in a step body (so the stop holds no lock and has no
statement on the wire). A second worker takes the runs over once the leases
expire (L3: charged once; a job not safe to repeat is held instead). Then the
victim is resumed: every write its passes try is refused (L6), each ends
superseded, and the victim goes on driving new runs. The same for a heartbeat
pass (L10), whose heartbeat thread was stopped with it. PostgreSQL, MariaDB and
SQLite; ``--concurrency`` 1 and 4.
"""

from __future__ import annotations

import re

import pytest

from django_leasejobs import start
from django_leasejobs.models import Run
from tests.faults import audit
from tests.faults.fleet import Fleet, Worker, pause, resume, when_asleep
from tests.faults.jobs import BEATING, UNSAFE, WALK
from tests.utils import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.faults]

PASSES, STEPS, STEP_SECONDS = 2, 3, 0.5
PAYLOAD = {"passes": PASSES, "steps": STEPS, "step_seconds": STEP_SECONDS}


def stop_asleep(worker: Worker, runs: list[str], log_dir) -> list[audit.Invocation]:
    """SIGSTOP *worker* at an instant when each of *runs* has a pass of it asleep in a step;
    the passes in flight then."""
    when_asleep(worker, runs, log_dir)
    at = pause(worker)
    paused = audit.open_at(log_dir, worker.pid, at)
    assert sorted(one.run_id for one in paused) == sorted(runs), paused
    return paused


def superseded(worker: Worker) -> int:
    """The passes the worker's drive reports say ended superseded (L6)."""
    return sum(int(n) for n in re.findall(r"superseded=(\d+)", worker.log()))


@pytest.mark.parametrize("concurrency", [1, 4])
@pytest.mark.parametrize("job", [WALK, BEATING], ids=["steps", "heartbeat"])
def test_f1_a_paused_worker_writes_nothing_and_its_runs_are_taken_over(tmp_path, job, concurrency):
    """F1, L3, L6, L10: taken over and charged once; the resumed passes superseded."""
    runs = [start(job, PAYLOAD, instance=f"f1-{n}").run.pk for n in range(concurrency)]
    fleet = Fleet(tmp_path, [job, WALK], concurrency)
    try:
        victim = fleet.start()
        paused = stop_asleep(victim, runs, tmp_path)

        rescuer = fleet.start()
        wait_for(
            lambda: (
                {one.run_id for one in audit.invocations(tmp_path) if one.pid == rescuer.pid}
                == set(runs)
            ),
            "the second worker to take every run over",
            180,  # a deadline, not a pace: on SQLite four takeovers queue for its one writer
            worker=rescuer.process,
        )
        resume(victim)  # while the rescuer's passes hold the runs
        wait_for(
            lambda: all(one.end for one in audit.invocations(tmp_path) if one.pid == victim.pid),
            "the resumed passes to end",
            60,
            worker=victim.process,
        )
        assert audit.settled(runs, 60), audit.statuses(runs)

        # The victim goes on driving: alone now, it drives new runs to the end.
        fleet.workers.remove(rescuer)
        rescuer.process.terminate()
        rescuer.process.wait(60)
        fresh = [
            start(WALK, {**PAYLOAD, "passes": 1}, instance=f"f1-after-{n}").run.pk
            for n in range(concurrency)
        ]
        assert audit.settled(fresh, 60), audit.statuses(fresh)
        assert {one.pid for one in audit.invocations(tmp_path) if one.run_id in fresh} == {
            victim.pid
        }
    finally:
        fleet.stop()

    ended = {(one.run_id, one.start): one for one in audit.invocations(tmp_path)}
    hows = [ended[one.run_id, one.start].how for one in paused]
    assert hows == ["LeaseLost"] * len(paused), hows  # each stopped at its next boundary (L6)
    assert superseded(victim) == len(paused), victim.log()
    takeovers = [
        min(
            (
                one
                for one in audit.invocations(tmp_path)
                if one.pid == rescuer.pid and one.run_id == run_id
            ),
            key=lambda one: one.start,
        )
        for run_id in runs
    ]
    assert [one.attempt for one in takeovers] == [2] * len(runs)  # charged once (L3)

    assert audit.assert_no_run_lost(runs + fresh) == {"done": len(runs) + len(fresh)}
    assert_invariants(tmp_path, fleet, runs, paused)
    audit.assert_only_committed_writes(fresh, 1, STEPS)


@pytest.mark.parametrize("concurrency", [1, 4])
def test_f1_a_paused_pass_not_safe_to_repeat_is_held(tmp_path, concurrency):
    """F1, L3: the takeover holds the run (``interrupted``) instead of replaying it; the
    resumed pass writes nothing to it."""
    runs = [start(UNSAFE, PAYLOAD, instance=f"f1-{n}").run.pk for n in range(concurrency)]
    fleet = Fleet(tmp_path, [UNSAFE], concurrency)
    try:
        victim = fleet.start()
        paused = stop_asleep(victim, runs, tmp_path)
        rescuer = fleet.start()
        assert audit.settled(runs, 60), audit.statuses(runs)
        held = snapshot(runs)
        resume(victim)
        wait_for(
            lambda: all(one.end for one in audit.invocations(tmp_path) if one.pid == victim.pid),
            "the resumed passes to end",
            60,
            worker=victim.process,
        )
        wait_for(
            lambda: superseded(victim) == len(paused),
            "the victim to report its passes superseded",
            60,
        )
    finally:
        fleet.stop()

    assert snapshot(runs) == held  # the resumed passes changed nothing: no row, no step (L6)
    assert audit.assert_no_run_lost(runs, allowed=("held",)) == {"held": len(runs)}
    codes = set(Run.objects.filter(pk__in=runs).values_list("failure_code", flat=True))
    assert codes == {"interrupted"}
    assert not [
        one for one in audit.invocations(tmp_path) if one.pid == rescuer.pid
    ]  # never replayed
    assert_invariants(tmp_path, fleet, runs, paused)


def snapshot(runs: list[str]) -> tuple[list[dict], list[tuple]]:
    """The runs' rows and their steps' rows, every column."""
    from django_leasejobs.models import Step

    rows = list(Run.objects.filter(pk__in=runs).order_by("pk").values())
    steps = list(Step.objects.filter(run_id__in=runs).order_by("run_id", "name").values_list())
    return rows, steps


def assert_invariants(
    log_dir, fleet: Fleet, runs: list[str], paused: list[audit.Invocation]
) -> None:
    """§17's invariants after the fault."""
    audit.assert_never_two_at_once(audit.intervals(log_dir, fleet.faults()))
    audit.assert_only_committed_writes(runs, PASSES, STEPS)
    done = list(Run.objects.filter(pk__in=runs, status="done").values_list("pk", flat=True))
    faulted = {one.pid for one in paused}
    audit.assert_side_effects(done, PASSES, STEPS, faulted, len(paused))
