"""L10: a heartbeat renews the lease of a pass with no step boundaries, until its timeout.

The worker is a real process; the would-be thief is this test process,
driving the same runs on its own connection. Without the heartbeat the
lease of 0.6 s runs out during the first pass and this process takes the
run over (a second attempt in the marks file), which is what the first test
would catch.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from django_leasejobs import InvalidJob, Limit, RunStatus, run_due_jobs, start
from django_leasejobs.models import Run
from tests.processes import django_command, take_over_while
from tests.utils import fresh, wait_for

WAIT = 60  # seconds: the longest any wait below may take before the test fails


def _began(marks, attempts=1):
    return wait_for(
        lambda: marks.exists() and len(marks.read_text().split()) >= attempts,
        f"attempt {attempts} to begin",
        WAIT,
        every=0.01,
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.concurrency
def test_l10_a_heartbeat_keeps_a_pass_of_three_leases_from_being_taken_over(tmp_path):
    marks = tmp_path / "marks"
    run = start("tests.heartbeat", {"sleep": 2.0, "marks": str(marks)}).run  # > 3 leases
    worker = django_command("rundueJobs", "--job", "tests.heartbeat")
    attempted, out, err = take_over_while(worker, "tests.heartbeat", lambda: _began(marks), WAIT)
    assert worker.returncode == 0, err
    assert "completed=1" in out
    assert attempted == 0
    assert marks.read_text().split() == ["1"]  # one pass: never run twice
    stored = fresh(run)
    assert (stored.status, stored.attempts, stored.failure_code) == (RunStatus.DONE, 0, "")


@pytest.mark.django_db(transaction=True)
@pytest.mark.concurrency
def test_l10_past_its_timeout_a_hung_pass_stops_beating_and_is_taken_over(tmp_path):
    marks = tmp_path / "marks"
    payload = {"sleep": WAIT, "until_attempt": 2, "marks": str(marks)}  # hangs till taken over
    run = start("tests.heartbeat.timeout", payload).run
    worker = django_command("rundueJobs", "--job", "tests.heartbeat.timeout")
    try:
        assert _began(marks)

        def taken_over():
            report = run_due_jobs(jobs=["tests.heartbeat.timeout"])
            return [report] if report.attempted else []

        (report,) = wait_for(taken_over, "the hung pass to be taken over", WAIT)
        assert report.completed == 1
        # The hung pass hangs until the takeover's attempt 2 has begun; its late
        # outcome, refused, says it was taken over while it still hung (below).
        out, err = worker.communicate(timeout=WAIT)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert marks.read_text().split() == ["1", "2"]  # the takeover was charged: attempt 2
    assert "superseded=1" in out, (out, err)  # the hung pass's late outcome wrote nothing
    assert fresh(run).status == RunStatus.DONE


@pytest.mark.django_db(transaction=True)
def test_l10_a_heartbeat_that_finds_the_lease_gone_stops_the_pass(define, drive):
    ran = []

    def handler(p):
        Run.objects.filter(pk=p.run.id).update(lease_owner="someone-else")  # the lease is gone
        beating = f"leasejobs-heartbeat-{p.run.id}"
        # The heartbeat finds out at its next beat (0.2 s) and ends: wait for that.
        wait_for(
            lambda: beating not in [t.name for t in threading.enumerate()],
            "the heartbeat to find the lease gone",
            WAIT,
            every=0.01,
        )
        p.step("after", lambda: ran.append("step"))  # refused at the boundary, never run
        return p.done()

    spec = define("t.l10.lost", handler, lease=timedelta(milliseconds=600), heartbeat=True)
    run = start(spec).run
    report = drive(spec)
    assert report.superseded == 1
    assert ran == []
    assert fresh(run).lease_owner == "someone-else"
    assert not [t for t in threading.enumerate() if t.name.startswith("leasejobs-heartbeat")]


@pytest.mark.django_db(transaction=True)
def test_l10_c2_a_heartbeat_never_revives_the_lease_of_a_pass_holding_a_slot(
    define, drive, frozen_clock
):
    """C2: a pass holding a concurrency slot renews only an unexpired lease, from its
    heartbeat too (its lease is made strict at BEGIN). Once its lease ran out, its slot
    may be another pass's: the heartbeat finds the lease lost and the pass is superseded.
    An unlimited job's heartbeat, whose lease is its owner's alone, renews it again."""
    lease = timedelta(milliseconds=600)
    renewed = []

    def handler(p):
        frozen_clock.advance(timedelta(seconds=3))  # past the lease, with nobody taking over
        if p.run.job == limited.name:
            beating = f"leasejobs-heartbeat-{p.run.id}"
            wait_for(
                lambda: beating not in [t.name for t in threading.enumerate()],
                "the heartbeat to find the lease run out",
                WAIT,
                every=0.01,
            )
        else:
            expired = frozen_clock.now()
            renewed.append(
                wait_for(
                    lambda: fresh(Run(pk=p.run.id)).next_attempt_at > expired,
                    "the heartbeat to renew the lease that ran out",
                    WAIT,
                    every=0.01,
                )
            )
        return p.done()

    limited = define("t.l10.c2", handler, lease=lease, heartbeat=True, limit=Limit(concurrency=1))
    unlimited = define("t.l10.c2.free", handler, lease=lease, heartbeat=True)
    run, free = start(limited).run, start(unlimited).run
    assert drive(limited).superseded == 1
    assert fresh(run).status == RunStatus.RUNNING  # taken over once due, like any lost pass
    assert drive(unlimited).completed == 1
    assert renewed == [True]
    assert fresh(free).status == RunStatus.DONE


@pytest.mark.django_db(transaction=True)
def test_l10_the_heartbeat_thread_ends_with_its_pass(define, drive):
    seen = []

    def handler(p):
        # The heartbeat's only: the claims keeper, once started, lives as long as the process.
        seen.extend(
            t.name for t in threading.enumerate() if t.name.startswith("leasejobs-heartbeat")
        )
        return p.done()

    spec = define("t.l10.ends", handler, heartbeat=True)
    run = start(spec).run
    assert drive(spec).completed == 1
    assert seen == [f"leasejobs-heartbeat-{run.pk}"]
    assert not [t for t in threading.enumerate() if t.name.startswith("leasejobs-heartbeat")]


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_l10_heartbeat_must_be_a_bool(define, value):
    if value is None:  # None is "not given": the default, no heartbeat
        assert define("t.l10.default", lambda p: p.done(), heartbeat=None).heartbeat is False
        return
    with pytest.raises(InvalidJob, match="heartbeat must be True or False"):
        define("t.l10.bad", lambda p: p.done(), heartbeat=value)
