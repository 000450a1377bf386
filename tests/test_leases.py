"""The lease protocol, L1-L8, on a controllable database clock (the L1 seam)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_leasejobs import Retry, RunStatus, release, start, store
from django_leasejobs.clock import DatabaseClock
from django_leasejobs.exceptions import LeaseLost
from django_leasejobs.leases import ENTRY_MARGIN, Countdown
from django_leasejobs.models import Run, Step
from django_leasejobs.signals import run_held
from tests.utils import fresh

pytestmark = pytest.mark.django_db

LEASE = timedelta(seconds=60)


# -- L1 ---


def test_l1_lease_times_come_from_the_clock_seam(frozen_clock):
    run = start("tests.walk").run
    t0 = frozen_clock.now()
    assert store.claim(run.pk, "A", LEASE, "h:1:1", takeover=False)
    assert fresh(run).next_attempt_at == t0 + LEASE
    frozen_clock.advance(timedelta(seconds=5))
    assert store.begin(run.pk, "A", LEASE * ENTRY_MARGIN)
    assert fresh(run).lease_began_at == t0 + timedelta(seconds=5)
    frozen_clock.advance(timedelta(seconds=30))
    assert store.renew(run.pk, "A", LEASE)
    assert fresh(run).next_attempt_at == t0 + timedelta(seconds=35) + LEASE


def test_l1_a_skewed_worker_clock_does_not_move_the_lease(define, drive, monkeypatch):
    """The worker's clock is a day ahead; the lease is still the database's now + lease."""
    skewed = timezone.now() + timedelta(days=1)
    monkeypatch.setattr(timezone, "now", lambda: skewed)
    seen = {}

    def handler(p):
        seen["expiry"] = Run.objects.get(pk=p.run.id).next_attempt_at
        return p.advance(1)

    spec = define("t.l1.skew", handler, lease=LEASE)
    start(spec)
    drive(spec)
    database_now = DatabaseClock().now()
    assert abs(seen["expiry"] - (database_now + LEASE)) < timedelta(minutes=30)
    assert seen["expiry"] < skewed


# -- L2 claim ---


def test_l2_one_claim_wins_and_the_lease_takes_the_run_out_of_the_due_read(frozen_clock):
    run = start("tests.walk").run
    assert store.claim(run.pk, "A", LEASE, "h", takeover=False)
    assert not store.claim(run.pk, "B", LEASE, "h", takeover=False)
    assert not Run.objects.due(frozen_clock.now_expr()).exists()
    claimed = fresh(run)
    assert claimed.lease_owner == "A"
    assert claimed.lease_holder == "h"
    assert claimed.attempts == 0


def test_l2_a_run_not_yet_due_cannot_be_claimed(frozen_clock):
    run = start("tests.walk").run
    Run.objects.filter(pk=run.pk).update(next_attempt_at=frozen_clock.now() + timedelta(seconds=1))
    assert not store.claim(run.pk, "A", LEASE, "h", takeover=False)
    frozen_clock.advance(timedelta(seconds=1))
    assert store.claim(run.pk, "A", LEASE, "h", takeover=False)


def test_l2_a_finished_run_cannot_be_claimed(frozen_clock):
    run = start("tests.walk").run
    Run.objects.filter(pk=run.pk).update(status=RunStatus.DONE)
    assert not store.claim(run.pk, "A", LEASE, "h", takeover=False)


def test_l2_each_pass_has_its_own_owner_token(define, drive):
    owners = []

    def handler(p):
        owners.append(Run.objects.get(pk=p.run.id).lease_owner)
        return p.advance(len(owners))

    spec = define("t.l2.owner", handler)
    start(spec)
    drive(spec, max_passes=3)
    assert len(owners) == 3
    assert len(set(owners)) == 3


def test_l2_claim_records_the_holder(define, drive):
    from django_leasejobs.holder import current_holder

    holders = []
    spec = define(
        "t.l2.holder",
        lambda p: holders.append(Run.objects.get(pk=p.run.id).lease_holder) or p.done(),
    )
    start(spec)
    drive(spec)
    host, pid, _start, _space = holders[0].split(":")
    assert holders == [current_holder()]
    assert int(pid) > 0
    assert host


# -- L3 takeover ---


def _abandon(run, clock, *, began):
    """Leave *run* as a crashed worker would: claimed (and begun), lease expired."""
    assert store.claim(run.pk, "dead", LEASE, "h", takeover=False)
    if began:
        assert store.begin(run.pk, "dead", LEASE * ENTRY_MARGIN)
    clock.advance(LEASE + timedelta(seconds=1))


def test_l3_takeover_of_a_begun_lease_charges_exactly_one_attempt(define, drive, frozen_clock):
    seen = []

    def handler(p):
        current = Run.objects.get(pk=p.run.id)
        seen.append((p.attempt, current.attempts, current.failure_code))
        raise RuntimeError("fail, so the charge stays visible")

    spec = define("t.l3", handler, lease=LEASE, retry=Retry(max_attempts=5, jitter=0))
    run = start(spec).run
    _abandon(run, frozen_clock, began=True)
    drive(spec)
    assert seen == [(2, 1, "lease_expired")]
    assert fresh(run).attempts == 2  # one for the takeover, one for this failed pass


def test_l3_takeover_of_a_never_begun_claim_costs_nothing(define, drive, frozen_clock):
    seen = []
    spec = define(
        "t.l3.free",
        lambda p: seen.append((p.attempt, Run.objects.get(pk=p.run.id).attempts)) or p.advance(1),
        lease=LEASE,
    )
    run = start(spec).run
    _abandon(run, frozen_clock, began=False)
    drive(spec)
    assert seen == [(1, 0)]
    assert fresh(run).failure_code == ""


def test_l3_a_takeover_that_exhausts_the_policy_fails_without_invoking(define, drive, frozen_clock):
    calls = []
    spec = define(
        "t.l3.exhaust",
        lambda p: calls.append(1) or p.done(),
        lease=LEASE,
        retry=Retry(max_attempts=1),
    )
    run = start(spec).run
    _abandon(run, frozen_clock, began=True)
    report = drive(spec)
    assert calls == []
    assert report.failed == 1
    failed = fresh(run)
    assert failed.status == RunStatus.FAILED
    assert failed.failure_code == "lease_expired"
    assert failed.live_key is None


def test_l3_a_job_not_safe_to_repeat_is_held_not_replayed(
    define, drive, frozen_clock, django_capture_on_commit_callbacks
):
    calls = []
    held_signals = []

    def receiver(sender, run, **kwargs):
        held_signals.append((run.pk, run.status))

    run_held.connect(receiver)
    try:
        spec = define(
            "t.l3.held",
            lambda p: calls.append(p.attempt) or p.done(),
            lease=LEASE,
            safe_to_repeat=False,
        )
        run = start(spec).run
        _abandon(run, frozen_clock, began=True)
        with django_capture_on_commit_callbacks(execute=True):
            report = drive(spec)
    finally:
        run_held.disconnect(receiver)
    assert calls == []
    assert report.held == 1
    held = fresh(run)
    assert held.status == RunStatus.HELD
    assert held.failure_code == "interrupted"
    assert held.live_key is not None  # still live: a new start joins it
    assert held_signals == [(run.pk, RunStatus.HELD)]
    frozen_clock.advance(timedelta(hours=1))
    assert drive(spec).attempted == 0  # never replayed on its own
    assert release(run.pk, resume=True, by="ops")
    assert drive(spec).completed == 1
    assert calls == [2]


def test_release_without_resume_fails_the_held_run(frozen_clock):
    run = start("tests.fragile").run
    Run.objects.filter(pk=run.pk).update(status=RunStatus.HELD, failure_code="interrupted")
    assert release(run.pk, resume=False, by="ops")
    failed = fresh(run)
    assert failed.status == RunStatus.FAILED
    assert failed.live_key is None
    assert "ops" in failed.last_error
    assert not release(run.pk, resume=True)  # already decided


# -- L4 begin ---


def test_l4_begin_needs_more_than_the_margin_by_the_database_clock(frozen_clock):
    run = start("tests.walk").run
    assert store.claim(run.pk, "A", LEASE, "h", takeover=False)
    frozen_clock.advance(LEASE * 0.8)  # only 20 % left, margin is 25 %
    assert not store.begin(run.pk, "A", LEASE * ENTRY_MARGIN)
    assert fresh(run).lease_began_at is None


def test_l4_begin_is_refused_to_another_owner(frozen_clock):
    run = start("tests.walk").run
    assert store.claim(run.pk, "A", LEASE, "h", takeover=False)
    assert not store.begin(run.pk, "B", LEASE * ENTRY_MARGIN)


def test_l4_a_slow_claim_reply_by_the_workers_own_count_does_not_begin(
    define, drive, monkeypatch, worker_clock
):
    calls = []
    spec = define("t.l4.slow", lambda p: calls.append(1) or p.done(), lease=LEASE)
    run = start(spec).run
    take = store.claim_and_read

    def slow_claim(*args, **kwargs):
        claimed = take(*args, **kwargs)
        worker_clock.now += 50  # the reply came 50 s into a 60 s lease
        return claimed

    monkeypatch.setattr(store, "claim_and_read", slow_claim)
    report = drive(spec)
    assert calls == []
    assert report.superseded == 1
    assert len(report.warnings) == 1
    assert fresh(run).admission_misses == 1


# -- L5 admission misses ---


def test_l5_misses_charge_nothing_back_off_and_fail_at_ten(
    define, drive, frozen_clock, monkeypatch
):
    spec = define("t.l5", lambda p: p.done(), lease=LEASE)
    run = start(spec).run
    monkeypatch.setattr("django_leasejobs.store.begin", lambda *args: False)
    waits = []
    for miss in range(1, 10):
        before = frozen_clock.now()
        report = drive(spec)
        assert report.superseded == 1
        assert f"admission miss {miss} of 10" in report.warnings[0].text
        after = fresh(run)
        assert after.admission_misses == miss
        assert after.attempts == 0
        assert after.lease_owner is None
        waits.append((after.next_attempt_at - before).total_seconds())
        make_due = after.next_attempt_at
        frozen_clock.set(make_due)
    assert waits == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    report = drive(spec)
    assert report.failed == 1
    failed = fresh(run)
    assert failed.status == RunStatus.FAILED
    assert failed.failure_code == "lease_too_short"
    assert "t.l5" in failed.last_error
    assert "0:01:00" in failed.last_error  # names the lease
    assert "admission miss 10 of 10" in failed.last_error


def test_l5_begin_clears_the_miss_count(define, drive, frozen_clock):
    spec = define("t.l5.clear", lambda p: p.advance(1), lease=LEASE)
    run = start(spec).run
    Run.objects.filter(pk=run.pk).update(admission_misses=4)
    drive(spec)
    assert fresh(run).admission_misses is None


# -- L6 fencing ---


def _steal(run_id, clock, worker_clock=None):
    """Another worker takes the run over after this pass's lease expired.

    The stalled worker's own clock moves on by as much, so it knows its lease
    may be gone (as it would after a long GC pause or a stopped VM).
    """
    clock.advance(LEASE + timedelta(seconds=1))
    if worker_clock is not None:
        worker_clock.now += (LEASE + timedelta(seconds=1)).total_seconds()
    assert store.claim(run_id, "thief", LEASE, "other:2:2", takeover=True)


def test_l6_a_pass_that_lost_its_lease_writes_nothing_and_is_superseded(
    define, drive, frozen_clock, worker_clock
):
    effects = []

    def handler(p):
        p.step("first", lambda: effects.append("first"))
        _steal(p.run.id, frozen_clock, worker_clock)
        p.step("second", lambda: effects.append("second"))
        p.count("never")
        return p.done()

    spec = define("t.l6", handler, lease=LEASE)
    run = start(spec).run
    report = drive(spec)
    assert report.superseded == 1
    assert report.completed == 0
    assert effects == ["first"]  # the second step never ran
    after = fresh(run)
    assert after.lease_owner == "thief"
    assert after.status == RunStatus.RUNNING
    assert after.counters == "{}"
    assert list(Step.objects.filter(run=run).values_list("name", flat=True)) == ["first"]


def test_l6_a_handler_catching_the_loss_still_writes_nothing(one_pass, frozen_clock):
    def handler(p):
        _steal(p.run.id, frozen_clock)
        try:
            p.step("after", lambda: None)
        except LeaseLost:
            return p.done()  # tries to turn the loss into a commit
        return None

    report, after = one_pass("t.l6.catch", handler, lease=LEASE)
    assert report.superseded == 1
    assert (after.status, after.lease_owner) == (RunStatus.RUNNING, "thief")


def test_l6_commit_is_fenced(define, drive, frozen_clock):
    spec = define("t.l6.commit", lambda p: _steal(p.run.id, frozen_clock) or p.done(), lease=LEASE)
    run = start(spec).run
    assert drive(spec).superseded == 1
    assert fresh(run).status == RunStatus.RUNNING


def test_l6_failure_settle_is_fenced(define, drive, frozen_clock):
    def handler(p):
        _steal(p.run.id, frozen_clock)
        raise RuntimeError("too late to matter")

    spec = define("t.l6.settle", handler, lease=LEASE)
    run = start(spec).run
    assert drive(spec).superseded == 1
    after = fresh(run)
    assert after.attempts == 1  # the thief's takeover charge, not this pass's failure
    assert after.last_error == store.TAKEOVER_NOTE


def test_l6_cancel_stops_a_pass_in_flight(one_pass):
    from django_leasejobs import cancel

    def handler(p):
        assert cancel(p.run.id, by="ops")
        p.step("after", lambda: None)
        return p.done()

    report, after = one_pass("t.l6.cancel", handler, lease=LEASE)
    assert report.superseded == 1
    assert (after.status, after.failure_code) == (RunStatus.CANCELLED, "cancelled")
    assert not Step.objects.filter(run=after).exists()


# -- L7 renewal ---


def test_l7_each_step_boundary_renews_the_lease(define, drive, frozen_clock):
    expiries = []

    def handler(p):
        for n in range(3):
            frozen_clock.advance(timedelta(seconds=40))
            p.step(f"s{n}", lambda: None)
            expiries.append(Run.objects.get(pk=p.run.id).next_attempt_at - frozen_clock.now())
        return p.done()

    spec = define("t.l7", handler, lease=LEASE)
    start(spec)
    assert drive(spec).completed == 1
    assert expiries == [LEASE, LEASE, LEASE]


def test_l7_a_pass_longer_than_its_lease_is_not_taken_over_while_it_steps(
    define, drive, frozen_clock
):
    rivals = []

    def handler(p):
        for n in range(5):  # 5 x 45 s = almost four leases
            frozen_clock.advance(timedelta(seconds=45))
            p.step(f"s{n}", lambda: None)
            rivals.append(store.claim(p.run.id, "rival", LEASE, "h", takeover=True))
            rivals.append(store.claim(p.run.id, "rival", LEASE, "h", takeover=False))
        return p.done()

    spec = define("t.l7.long", handler, lease=LEASE)
    run = start(spec).run
    assert drive(spec).completed == 1
    assert rivals == [False] * 10
    assert fresh(run).status == RunStatus.DONE


def test_l7_check_renews_a_lease_running_low(define, drive, frozen_clock, worker_clock):
    expiry = []

    def handler(p):
        frozen_clock.advance(timedelta(seconds=40))
        worker_clock.now += 40
        p.check()  # 20 s left by the worker's count: below half, so it renews
        expiry.append(Run.objects.get(pk=p.run.id).next_attempt_at - frozen_clock.now())
        return p.done()

    spec = define("t.l7.check", handler, lease=LEASE)
    start(spec)
    drive(spec)
    assert expiry == [LEASE]


def test_l7_l10_of_two_renewals_that_wrote_the_later_sent_counts_whichever_is_told_last(
    worker_clock,
):
    """A heartbeat's renewal and a step's, on two threads, may tell the countdown in
    either order. The one the database ran last set the expiry, and it ran after both
    were sent, so the countdown counts from the later send -- never back to the earlier
    one because its thread was slower to say so."""
    countdown = Countdown(LEASE, Countdown.now())
    worker_clock.now += 10
    step_sent = Countdown.now()
    worker_clock.now += 5
    countdown.renewed(step_sent)
    countdown.renewed(step_sent - 5)  # the heartbeat's, sent earlier, told later
    assert countdown.left() == LEASE - timedelta(seconds=5)


# -- L8 outcomes clear the lease ---


@pytest.mark.parametrize(
    ("outcome", "due_in"),
    [("advance", timedelta(0)), ("fail", timedelta(seconds=7)), ("defer", timedelta(minutes=3))],
)
def test_l8_every_outcome_clears_the_lease(define, drive, frozen_clock, outcome, due_in):
    from django_leasejobs import Defer

    def handler(p):
        if outcome == "fail":
            raise RuntimeError("x")
        if outcome == "defer":
            raise Defer(timedelta(minutes=3))
        return p.advance(1)

    policy = Retry(max_attempts=3, base=timedelta(seconds=7), cap=timedelta(seconds=7), jitter=0)
    spec = define(f"t.l8.{outcome}", handler, lease=LEASE, retry=policy)
    run = start(spec).run
    drive(spec)
    after = fresh(run)
    assert after.lease_owner is None
    assert after.lease_began_at is None
    assert after.next_attempt_at == frozen_clock.now() + due_in  # never the old expiry
