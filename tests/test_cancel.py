"""SPEC §3 ``cancel`` (revision 2): a cancelled run's key is held until its pass has stopped."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest

from django_leasejobs import RunStatus, cancel, retry, start, store
from django_leasejobs.models import Run
from tests.models import PassLog
from tests.processes import django_command
from tests.utils import fresh, wait_for

LEASE = timedelta(seconds=30)
WAIT = 60


def in_flight(spec, frozen_clock):
    """A run of *spec* whose pass has begun (claimed and begun by hand, as a worker would)."""
    run = start(spec).run
    assert store.claim(run.pk, "owner-1", LEASE, "host:1:1:x", takeover=False)
    assert store.begin(run.pk, "owner-1", LEASE / 4)
    return run


@pytest.mark.django_db
def test_cancel_a_run_whose_pass_is_in_flight_keeps_its_key_until_the_pass_stops(
    define, frozen_clock
):
    spec = define("t.cancel.flight", lambda p: p.done(), lease=LEASE)
    run = in_flight(spec, frozen_clock)
    assert cancel(run.pk, by="ops")
    cancelled = fresh(run)
    assert cancelled.status == RunStatus.CANCELLED
    assert cancelled.ended_at == frozen_clock.now()
    assert cancelled.live_key is not None  # the pass may still be running
    joined = start(spec, {"v": 2})
    assert joined.joined  # never a second run beside the cancelled pass
    assert joined.run.pk == run.pk
    # The pass finds its next write refused and stops; then the key is freed
    # and the start that waited becomes the follow-up run.
    assert not store.renew(run.pk, "owner-1", LEASE)
    assert store.stop_cancelled(run.pk, "owner-1")
    assert fresh(run).live_key is None
    follow_up = Run.objects.exclude(pk=run.pk).get(job=spec.name)
    assert (follow_up.status, follow_up.origin) == (RunStatus.RUNNING, "follow_up")
    assert follow_up.decoded_payload().value == {"v": 2}


@pytest.mark.django_db
def test_cancel_a_run_with_no_pass_in_flight_frees_its_key_at_once(define, frozen_clock):
    spec = define("t.cancel.idle", lambda p: p.done(), lease=LEASE)
    run = start(spec).run
    assert cancel(run.pk)
    assert fresh(run).live_key is None
    assert not start(spec).joined


@pytest.mark.django_db
def test_cancel_a_pass_whose_worker_died_frees_the_key_when_its_lease_expires(define, frozen_clock):
    spec = define("t.cancel.dead", lambda p: p.done(), lease=LEASE)
    run = in_flight(spec, frozen_clock)
    assert cancel(run.pk)
    assert start(spec).joined
    frozen_clock.advance(LEASE + timedelta(seconds=1))
    # A start after the expiry frees the key and starts afresh ...
    result = start(spec, {"v": 3})
    assert not result.joined
    assert fresh(run).live_key is None
    # ... and with no start, the drive's housekeeping frees it (and starts any follow-up).
    other = in_flight(define("t.cancel.dead2", lambda p: p.done(), lease=LEASE), frozen_clock)
    assert cancel(other.pk)
    assert start("t.cancel.dead2", {"v": 4}, again=True).joined
    frozen_clock.advance(LEASE + timedelta(seconds=1))
    assert store.release_expired_cancels(100) == 1
    follow_up = Run.objects.filter(job="t.cancel.dead2").exclude(pk=other.pk).get()
    assert follow_up.decoded_payload().value == {"v": 4}


@pytest.mark.django_db
def test_retry_right_after_a_cancel_waits_for_the_cancelled_pass(define, frozen_clock):
    spec = define("t.cancel.retry", lambda p: p.done(), lease=LEASE)
    run = in_flight(spec, frozen_clock)
    assert cancel(run.pk)
    assert retry(run.pk).joined
    assert Run.objects.filter(job=spec.name).count() == 1
    store.stop_cancelled(run.pk, "owner-1")
    assert Run.objects.filter(job=spec.name, status=RunStatus.RUNNING).count() == 1


@pytest.mark.django_db
def test_cancel_accepts_a_stranded_row_holding_a_key():
    run = start("tests.noop").run
    Run.objects.filter(pk=run.pk).update(status="weird")  # hand-edited
    assert cancel(run.pk)
    assert fresh(run).status == RunStatus.CANCELLED
    assert fresh(run).live_key is None
    assert not cancel(run.pk)


@pytest.mark.django_db(transaction=True)
@pytest.mark.concurrency
def test_cancel_then_start_never_overlaps_two_passes_of_one_key(tmp_path):
    """The operators' guide's sequence -- cancel, then start again -- with two real workers."""
    gate = tmp_path / "started-again"  # each step waits for it: the pass is in flight till then
    payload = {"passes": 1, "steps": 8, "sleep": WAIT, "until_file": str(gate)}
    first = start("tests.counted_walk", payload, instance="k").run
    workers = [
        django_command("rundueJobs", "--loop", "--interval", "0.05", "--job", "tests.counted_walk")
        for _ in range(2)
    ]
    try:
        began = PassLog.objects.filter(run_id=first.pk)
        wait_for(began.exists, "a worker to begin the first pass", every=0.02, worker=workers)
        assert cancel(first.pk, by="ops")
        second = start("tests.counted_walk", payload, instance="k")
        assert second.joined  # the cancelled pass is still running
        gate.touch()
        done = Run.objects.filter(job="tests.counted_walk", instance="k", status=RunStatus.DONE)
        wait_for(done.exists, "the start after the cancel to run", worker=workers)
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.communicate(timeout=WAIT)
    runs = list(Run.objects.filter(job="tests.counted_walk", instance="k").order_by("id"))
    assert [run.status for run in runs] == [RunStatus.CANCELLED, RunStatus.DONE]
    spans = sorted(
        (log.started_ns, log.ended_ns)
        for log in PassLog.objects.filter(run_id__in=[run.pk for run in runs])
    )
    assert len(spans) == 2
    assert [later for earlier, later in itertools.pairwise(spans) if later[0] < earlier[1]] == []
