"""W5 + L10 + R10: the heartbeat and the timeout of each pass, on a worker's threads.

One ``rundueJobs --concurrency 4`` process (a one-shot drive: it waits for
every pass it began) runs four passes at once. The would-be thief of the
heartbeat test is this test process, driving the same runs on its own
connection, as in ``tests/test_heartbeat.py``.
"""

from __future__ import annotations

import json

import pytest

from django_leasejobs import RunStatus, start
from django_leasejobs.models import Run
from tests.models import PassLog
from tests.processes import django_command, take_over_while
from tests.test_concurrency import WAIT, _most_at_once
from tests.utils import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]


def test_w5_l10_each_threads_heartbeat_keeps_its_pass_from_being_taken_over():
    """W5 + L10: four runs of ``tests.w5.heartbeat`` (0.6 s lease, ``heartbeat=True``)
    whose passes sleep 2 s with no step boundary -- more than three leases -- four at
    once in one ``--concurrency 4`` process. For as long as they run this process
    tries to take them over: it never claims one, each handler ran once, and each
    run is done with no attempt charged."""
    job = "tests.w5.heartbeat"
    runs = [start(job, {"sleep": 2.0}, instance=f"h{n}").run.pk for n in range(4)]
    worker = django_command("rundueJobs", "--concurrency", "4", "--json", "--job", job)
    began = PassLog.objects.filter(run_id__in=runs)

    def four_began() -> bool:  # the thief waits for the passes to begin, or it would win them
        return wait_for(
            lambda: worker.poll() is not None or began.count() >= 4,
            "four passes to begin",
            WAIT,
            every=0.02,
        )

    attempted, out, err = take_over_while(worker, job, four_began, WAIT)
    assert worker.returncode == 0, err
    assert json.loads(out)["completed"] == 4
    assert attempted == 0
    logs = list(began)
    assert sorted(log.run_id for log in logs) == sorted(runs)  # each handler ran once
    assert len({log.pid for log in logs}) == 1
    assert _most_at_once(logs) == 4
    assert all((log.ended_ns - log.started_ns) / 1e9 >= 2.0 for log in logs)
    finished = Run.objects.filter(pk__in=runs)
    assert set(finished.values_list("status", "attempts", "failure_code")) == {
        (RunStatus.DONE, 0, "")
    }


def test_w5_r10_a_pass_past_its_timeout_fails_while_the_others_on_the_threads_complete():
    """W5 + R10: ``tests.w5.timed`` (timeout 1 s, one attempt). Two slow runs (a hundred
    steps of 0.3 s) and forty quick ones (two steps of 0.05 s) in one ``--concurrency 4``
    drive. Each slow pass learns at a step boundary past its own second and fails
    with ``failure_code="timeout"``; the quick passes, which ran beside them and
    after them on the same threads for longer than a second in all, complete: the
    timeout is each pass's own, counted from its BEGIN."""
    job = "tests.w5.timed"
    # A slow pass would run 30 s if nothing stopped it; a quick one is a tenth of the
    # timeout, so that only a machine stalled for most of a second could time one out.
    slow = [
        start(job, {"steps": 100, "step_seconds": 0.3}, instance=f"a{n}").run.pk for n in (1, 2)
    ]
    quick = [
        start(job, {"steps": 2, "step_seconds": 0.05}, instance=f"b{n:02}").run.pk
        for n in range(40)
    ]
    worker = django_command("rundueJobs", "--concurrency", "4", "--json", "--job", job)
    out, err = worker.communicate(timeout=WAIT)
    assert worker.returncode == 0, err
    report = json.loads(out)
    assert (report["failed"], report["completed"]) == (2, 40)

    timed_out = Run.objects.filter(pk__in=slow)
    assert set(timed_out.values_list("status", "failure_code")) == {(RunStatus.FAILED, "timeout")}
    assert all("PassTimedOut" in run.last_error for run in timed_out)
    done = Run.objects.filter(pk__in=quick)
    assert set(done.values_list("status", "attempts", "failure_code")) == {(RunStatus.DONE, 0, "")}
    slow_logs = list(PassLog.objects.filter(run_id__in=slow))
    quick_logs = list(PassLog.objects.filter(run_id__in=quick))
    assert len(slow_logs) == 2
    assert len(quick_logs) == 40
    assert len({log.pid for log in slow_logs + quick_logs}) == 1
    for log in slow_logs:  # stopped at a boundary past 1 s, long before its 30 s of steps
        # The timeout counts from the BEGIN; the handler stamps its start later (after its
        # PassLog row), so its own count may end short of 1 s -- by less than a step.
        assert 1.0 - 0.3 <= (log.ended_ns - log.started_ns) / 1e9 < 100 * 0.3
    # Quick passes ran while the slow ones did ...
    assert any(
        q.started_ns < s.ended_ns and s.started_ns < q.ended_ns
        for q in quick_logs
        for s in slow_logs
    )
    # ... and the threads' quick passes ran for longer than one timeout in all.
    first, last = min(q.started_ns for q in quick_logs), max(q.ended_ns for q in quick_logs)
    assert (last - first) / 1e9 > 1.0
