"""W5 with a real crash: a ``rundueJobs --loop --concurrency 4`` worker SIGKILLed mid-drain.

Four passes are in flight on its four threads when it dies. Its runs are
taken over -- at once, since a drive on this host sees its process gone (L9),
else at their lease's expiry (L3) -- and each in-flight pass repeats at most
its step in flight: one per thread. A job not safe to repeat is held instead.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict

import pytest

from django_leasejobs import RunStatus, start
from django_leasejobs.models import Run, Step
from tests.models import Effect, PassLog
from tests.processes import frozen
from tests.test_concurrency import (
    WAIT,
    by_run,
    overlapping,
    stop_all,
    totals,
    wait_until_settled,
    workers,
)
from tests.utils import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]


def kill(worker) -> int:
    """SIGKILL *worker* (nothing released, nothing written); return when, monotonic ns."""
    worker.kill()
    killed_ns = time.monotonic_ns()
    worker.communicate(timeout=WAIT)
    return killed_ns


def test_w5_sigkill_mid_drain_loses_no_run_and_repeats_at_most_one_step_per_thread():
    """W5 + L3/L9 + R5: eight runs of three passes of three steps (``tests.w5.killed``,
    2 s lease, an Effect row per step). The worker is SIGKILLed with four passes in
    flight, well into the drain, two of them past their first step; a restarted
    worker finishes the work. No run is lost or failed, counters are exact, every
    step ran, no step recorded before the kill ran again, and a step ran twice only
    if it was in flight in the killed worker: at most four, one per thread. No two
    passes of one run overlapped, the killed ones counted until the kill."""
    job = "tests.w5.killed"
    payload = {"passes": 3, "steps": 3, "sleep": 0.2}
    runs = [start(job, payload, instance=f"k{n}").run.pk for n in range(8)]
    (first,) = workers(1, "--job", job)
    in_flight = PassLog.objects.filter(pid=first.pid, ended_ns=0)
    # The steps the passes in flight have recorded (their steps before, R3 dropped).
    recorded = Step.objects.filter(result__isnull=False)

    def mid_drain():
        """Passes ended and new ones begun, all four threads busy, two of them mid-pass."""
        if PassLog.objects.count() < 6 or in_flight.count() != 4:
            return False
        return recorded.values("run_id").distinct().count() >= 2

    def killed_mid_drain() -> int | None:
        # Read while the worker is stopped, so that what the test reads is what the
        # SIGKILL leaves, however long the read takes on a busy machine.
        with frozen(first):
            if not mid_drain():
                return None
            first.kill()
            return time.monotonic_ns()

    try:
        killed_ns = wait_for(
            killed_mid_drain, "four passes in flight, two past their first step", worker=first
        )
    finally:
        if first.poll() is None:
            first.kill()
        first.communicate(timeout=WAIT)
    killed = list(in_flight.values_list("run_id", flat=True))
    assert len(killed) == 4
    assert Run.objects.filter(pk__in=killed, lease_began_at__isnull=False).count() == 4
    done_before = set(recorded.filter(run_id__in=killed).values_list("run_id", "name"))
    assert len({run_id for run_id, _name in done_before}) >= 2

    fleet = workers(1, "--job", job)  # the restarted worker
    try:
        wait_until_settled(job, len(runs), fleet)
    finally:
        reaped = stop_all(fleet)
    assert [code for code, _out, _err in reaped] == [0], reaped

    finished = Run.objects.filter(pk__in=runs)
    assert set(finished.values_list("status", "attempts", "failure_code")) == {
        (RunStatus.DONE, 0, "")
    }
    for run in finished:
        assert run.decoded_counters().value == {"steps": 9, "passes": 3}
    assert not Step.objects.filter(run_id__in=runs).exists()

    executions = defaultdict(list)
    for run_id, name, pid in Effect.objects.order_by("pk").values_list("run_id", "name", "pid"):
        executions[run_id, name].append(pid)
    assert len(executions) == 8 * 3 * 3  # every step ran
    repeated = {key: pids for key, pids in executions.items() if len(pids) > 1}
    assert sum(len(pids) - 1 for pids in repeated.values()) <= 4, repeated
    assert all(pids[0] == first.pid and len(pids) == 2 for pids in repeated.values())
    # The step in flight of each killed pass, and nothing else: none a thread had recorded.
    assert not set(repeated) & done_before, set(repeated) & done_before
    repeated_runs = Counter(run_id for run_id, _name in repeated)
    assert set(repeated_runs) <= set(killed)
    assert set(repeated_runs.values()) <= {1}

    logs = list(PassLog.objects.filter(run_id__in=runs))
    assert overlapping(by_run(logs, killed_ns)) == []
    # Each killed run was taken over and finished by the restarted worker.
    summed = totals(reaped)
    assert summed["completed"] >= 4
    assert summed["failed"] == 0
    for run_id in killed:
        assert PassLog.objects.filter(run_id=run_id).exclude(pid=first.pid).exists()


def test_w5_l3_a_pass_not_safe_to_repeat_killed_on_a_thread_is_held_not_replayed():
    """W5 + L3: four runs of ``tests.unrepeatable`` (``safe_to_repeat=False``), each hung
    in its second step on one of the four threads of a ``--concurrency 4`` worker,
    which is SIGKILLed. Another ``--concurrency 4`` worker takes them over: each is
    ``held`` with ``failure_code="interrupted"``, and none is invoked again -- not at
    the takeover, nor once its lease is long past."""
    job = "tests.unrepeatable"
    runs = [start(job, instance=f"u{n}").run.pk for n in range(4)]
    (first,) = workers(1, "--job", job)
    recorded = Step.objects.filter(run_id__in=runs, name="one", result__isnull=False)
    try:
        wait_for(lambda: recorded.count() == 4, "step one of all four runs", worker=first)
    finally:
        kill(first)
    invoked = Effect.objects.filter(run_id__in=runs, name__startswith="invoked")
    assert sorted(invoked.values_list("name", "pid")) == [("invoked@1", first.pid)] * 4

    fleet = workers(1, "--job", job)
    try:
        wait_until_settled(job, len(runs), fleet)
        time.sleep(1.5)  # past the one-second lease: still nothing runs them
    finally:
        reaped = stop_all(fleet)
    assert [code for code, _out, _err in reaped] == [0], [err[-3000:] for _c, _o, err in reaped]
    held = Run.objects.filter(pk__in=runs)
    assert set(held.values_list("status", "failure_code", "lease_owner")) == {
        (RunStatus.HELD, "interrupted", None)
    }
    assert invoked.count() == 4  # none invoked again
    assert not Effect.objects.filter(run_id__in=runs, name__startswith="two").exists()
    assert Effect.objects.filter(run_id__in=runs, name="one").count() == 4
    summed = totals(reaped)
    assert (summed["held"], summed["attempted"], summed["completed"]) == (4, 4, 0)
