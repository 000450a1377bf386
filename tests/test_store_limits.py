"""Flow control's writes in one process (SPEC §14, C2-C5): slots, rates, fairness, budgets.

What ``django_leasejobs.store.limits`` does when a limited pass begins or is
throttled. Passes "in flight elsewhere" are rows, not threads (see
``tests/limit_helpers.py``); the frozen clock (L1's seam) moves leases and
rate states without sleeping. Real processes are in ``test_limits_processes.py``.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_leasejobs import (
    Limit,
    Rate,
    RunStatus,
    registry,
    start,
    start_many,
    store,
)
from django_leasejobs.ids import new_owner
from django_leasejobs.models import RateState, Run, Slot
from django_leasejobs.retention import prune
from django_leasejobs.store import limits as store_limits
from django_leasejobs.store import renewals
from django_leasejobs.store.held_back import spaced
from tests.limit_helpers import (
    KEYED,
    LIMITED,
    QUICK,
    RATED,
    SECOND,
    handler,
    handler_calls,
    hold_slots,
)
from tests.test_deadlocks import deadlock
from tests.test_driver import DRIVE, one_pass
from tests.utils import fresh, statements, wait_for

pytestmark = pytest.mark.django_db

#: How far apart RATED's held-back runs fall due: its 400 ms, and the margin (C3).
SPACED = spaced(0.4 * SECOND)


# -- C2 concurrency ---


def test_c2_a_pass_with_no_free_slot_is_throttled_and_charged_nothing(frozen_clock, drive, caplog):
    """C2: with both slots held elsewhere, a third pass runs nothing: its claim is let
    go, no attempt and no admission miss are charged, it is due again in a second, and
    the drive counts it ``throttled``, not ``attempted`` (C4). Nothing is logged (C5)."""
    now = frozen_clock.now()
    holders = hold_slots(LIMITED, 2, until=now + 2 * SECOND)
    run = start(LIMITED, QUICK, instance="third").run
    before = fresh(run)

    with caplog.at_level(logging.INFO, logger="django_leasejobs"):
        report = drive(LIMITED)

    assert (report.throttled, report.attempted, report.completed) == (1, 0, 0)
    assert (report.superseded, report.errors, report.warnings) == (0, [], [])
    after = fresh(run)
    assert after.status == RunStatus.RUNNING
    assert after.lease_owner is None
    assert after.lease_began_at is None
    assert after.attempts == before.attempts == 0
    assert after.admission_misses == before.admission_misses
    assert (after.failure_code, after.last_error) == ("", "")
    assert after.throttled_by == "concurrency"
    assert after.next_attempt_at == now + SECOND
    assert handler_calls(run) == 0
    assert sorted(Slot.objects.values_list("run_id", flat=True)) == sorted(h.pk for h in holders)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize(
    ("typical", "wait"),
    [(0.2, 0.2), (0.001, 0.05), (30.0, 1.0)],
    ids=["a pass's time", "at least 50 ms", "at most a second"],
)
def test_c2_a_run_refused_a_slot_is_due_again_after_about_one_of_its_jobs_passes(
    frozen_clock, drive, typical, wait
):
    """C2: "within about a second, sooner when a slot frees": a slot takes about one of
    the job's passes to free, so the refused run comes back then -- at least 50 ms
    later, at most a second."""
    from django_leasejobs.pacing import pace

    now = frozen_clock.now()
    hold_slots(LIMITED, 2, until=now + 2 * SECOND)
    run = start(LIMITED, QUICK, instance="third").run
    pace.observe(LIMITED, typical)
    assert drive(LIMITED).throttled == 1
    assert fresh(run).next_attempt_at == now + timedelta(seconds=wait)


def test_c4_a_keys_other_runs_are_held_back_in_one_statement_not_claimed(frozen_clock, drive):
    """C4: once a drive finds a key at its limit, its other due runs are not claimed one by
    one only to be let go: the drive moves them all to the same due time in one statement,
    so the statements a drive spends on a full key do not grow with its backlog."""

    def statements_for(waiting):
        Run.objects.filter(job=LIMITED).delete()
        Slot.objects.all().delete()
        now = frozen_clock.now()
        hold_slots(LIMITED, 2, until=now + 2 * SECOND)
        runs = [start(LIMITED, QUICK, instance=f"w{n}").run for n in range(waiting)]
        with CaptureQueriesContext(connection) as captured:
            report = drive(LIMITED)
        assert (report.throttled, report.attempted) == (waiting, 0)
        due = {fresh(run).next_attempt_at for run in runs}
        assert due == {now + SECOND}  # every one of them, the claimed one and those held back
        assert {fresh(run).throttled_by for run in runs} == {"concurrency"}
        assert all(fresh(run).attempts == 0 and fresh(run).lease_owner is None for run in runs)
        return len(statements(captured))

    statements_for(2)  # the process's first drive also does its housekeeping (D6)
    assert statements_for(3) == statements_for(30)


def test_c4_a_held_back_run_another_worker_claimed_meanwhile_is_left_alone(frozen_clock):
    """C4: holding back moves only runs still due and unclaimed, never a held lease."""
    from django_leasejobs.ids import new_owner
    from django_leasejobs.states import Throttle
    from django_leasejobs.store import throttle_unclaimed

    now = frozen_clock.now()
    free, taken = (start(LIMITED, QUICK, instance=name).run for name in ("free", "taken"))
    Run.objects.filter(pk=taken.pk).update(lease_owner=new_owner(), next_attempt_at=now + SECOND)
    assert throttle_unclaimed([free.pk, taken.pk], Throttle.CONCURRENCY, None, SECOND) == 1
    assert fresh(taken).next_attempt_at == now + SECOND
    assert fresh(taken).throttled_by == ""


def test_c2_the_slot_frees_when_its_holders_lease_expires(frozen_clock, drive):
    """C2: a slot is held while its holder's lease is begun and unexpired, so a crashed
    pass's slot frees when that lease runs out -- and the waiting run begins."""
    now = frozen_clock.now()
    hold_slots(LIMITED, 2, until=now + 2 * SECOND)
    run = start(LIMITED, QUICK, instance="third").run
    assert drive(LIMITED).throttled == 1

    frozen_clock.advance(1.5 * SECOND)  # due again; the holders' leases still run
    assert drive(LIMITED).throttled == 1
    assert fresh(run).next_attempt_at == now + 2.5 * SECOND

    frozen_clock.advance(SECOND)  # past the holders' leases: both slots are free
    report = drive(LIMITED)
    # the waiting run, and the two "crashed" holders' runs, taken over (L3)
    assert (report.completed, report.throttled) == (3, 0)
    done = fresh(run)
    assert (done.status, done.attempts, done.throttled_by) == (RunStatus.DONE, 0, "")
    assert handler_calls(run) == 1


def test_c2_a_slot_whose_holder_never_began_or_has_finished_is_free(frozen_clock, drive):
    """C2: only a begun, unexpired lease holds a slot -- not a claim that never began
    (BEGIN takes the slot), not a run whose pass already ended (its outcome freed it)."""
    now = frozen_clock.now()
    claimed, finished = hold_slots(LIMITED, 2, until=now + 2 * SECOND)
    Run.objects.filter(pk=claimed.pk).update(lease_began_at=None)
    Run.objects.filter(pk=finished.pk).update(
        status=RunStatus.DONE, lease_owner=None, lease_began_at=None, live_key=None
    )
    runs = [start(LIMITED, QUICK, instance=f"r{n}").run for n in range(2)]
    report = drive(LIMITED)
    assert (report.completed, report.throttled) == (2, 0)
    assert all(fresh(run).status == RunStatus.DONE for run in runs)


def test_c2_one_free_slot_lets_one_pass_in_at_a_time(frozen_clock, drive):
    """C2: with one slot of two held elsewhere, this process's passes take the other one
    in turn: each frees it at its outcome, in the same statement that ends its lease."""
    hold_slots(LIMITED, 1, until=frozen_clock.now() + 2 * SECOND)
    runs = [start(LIMITED, QUICK, instance=f"r{n}").run for n in range(3)]
    report = drive(LIMITED)
    assert (report.completed, report.throttled) == (3, 0)
    assert all(fresh(run).status == RunStatus.DONE for run in runs)
    assert Slot.objects.filter(job=LIMITED).count() == 2


def test_c2_c4_each_key_has_its_own_slots(frozen_clock, drive):
    """C1 + C2 + C4: account ``a``'s two slots held elsewhere throttle ``a``'s run only;
    account ``b``'s runs, behind it in due order, begin in the same drive."""
    hold_slots(KEYED, 2, until=frozen_clock.now() + 2 * SECOND, key="a")
    waiting = start(KEYED, {"account": "a", **QUICK}, instance="a1").run
    frozen_clock.advance(timedelta(milliseconds=1))
    others = [start(KEYED, {"account": "b", **QUICK}, instance=f"b{n}").run for n in range(2)]
    report = drive(KEYED)
    assert (report.throttled, report.completed, report.attempted) == (1, 2, 2)
    assert fresh(waiting).throttled_by == "concurrency"
    assert [fresh(run).status for run in others] == [RunStatus.DONE] * 2
    assert set(Slot.objects.filter(job=KEYED).values_list("key", flat=True)) == {"a", "b"}


def test_c2_a_pass_holding_a_slot_never_renews_a_lease_that_ran_out(frozen_clock, define, drive):
    """C2 + L7: a pass holding a slot renews only an unexpired lease: once it ran out, its
    slot may be another pass's, so the next step boundary finds it lost (``superseded``)
    instead of reviving it. An unlimited job's renewal, held by its owner alone, does."""

    def late(p):
        p.step("one", lambda: 1)
        frozen_clock.advance(3 * SECOND)  # past the 2 s lease, with nobody taking over
        p.step("two", lambda: 2)
        return p.done()

    limited = define("t.c2.late", late, lease=2 * SECOND, limit=Limit(concurrency=1))
    unlimited = define("t.c2.late.free", late, lease=2 * SECOND)
    run = start(limited).run
    free = start(unlimited).run
    assert drive(limited).superseded == 1
    assert fresh(run).status == RunStatus.RUNNING  # taken over once due, like any lost pass
    assert drive(unlimited).completed == 1
    assert fresh(free).status == RunStatus.DONE


@pytest.mark.django_db(transaction=True)
def test_c2_s12_a_slot_holders_renewal_that_loses_a_deadlock_is_run_again(monkeypatch):
    """§12: a store write that loses a deadlock or serialization race is run again. The
    renewal -- strict for a slot holder (C2), or not -- is one such write (L7)."""
    run = start(LIMITED, QUICK).run
    owner = new_owner()
    until = timezone.now() + timedelta(hours=1)
    Run.objects.filter(pk=run.pk).update(
        lease_owner=owner, lease_began_at=timezone.now(), next_attempt_at=until
    )
    renewal = renewals._renewal
    failures = []

    class Racing:
        def __init__(self, statement):
            self.statement = statement

        def run(self, *args, **kwargs):
            if len(failures) < 2:
                failures.append(1)
                raise deadlock()
            return self.statement.run(*args, **kwargs)

    monkeypatch.setattr(renewals, "_renewal", lambda **kw: Racing(renewal(**kw)))
    for strict in (True, False):
        failures.clear()
        assert store.renew(run.pk, owner, 2 * SECOND, strict=strict)
        assert len(failures) == 2


# -- the limited BEGIN is all or nothing ---


def test_c2_c3_a_pass_its_rate_refuses_keeps_no_slot(frozen_clock, define, drive):
    """C2 + C3: the slot, the rate token and BEGIN are one transaction: a pass the rate
    throttles after it took a free slot gives the slot back (no row names it)."""
    both = Limit(concurrency=1, rate=Rate(1, per=10 * SECOND))
    spec = define("t.c23.both", handler, limit=both)
    first, second = (start(spec, instance=f"r{n}").run for n in range(2))
    report = drive(spec)
    assert (report.completed, report.throttled) == (1, 1)
    assert fresh(first).status == RunStatus.DONE
    waiting = fresh(second)
    assert waiting.throttled_by == "rate"
    assert waiting.next_attempt_at == frozen_clock.now() + 10 * SECOND
    assert not Slot.objects.filter(run_id=second.pk).exists()
    assert not Slot.objects.filter(owner__isnull=False).exclude(run_id=first.pk).exists()


def test_c2_c3_a_pass_refused_a_slot_spends_no_rate_token(frozen_clock, define, drive):
    both = Limit(concurrency=1, rate=Rate(1, per=10 * SECOND))
    spec = define("t.c23.full", handler, limit=both)
    hold_slots(spec.name, 1, until=frozen_clock.now() + 2 * SECOND)
    RateState.objects.create(job=spec.name, key="", tat=frozen_clock.now() - SECOND)
    run = start(spec, instance="waiting").run
    assert drive(spec).throttled == 1
    assert fresh(run).throttled_by == "concurrency"
    assert RateState.objects.get(job=spec.name).tat == frozen_clock.now() - SECOND


def test_c2_c3_a_begin_refused_after_the_slot_and_token_gives_both_back(
    frozen_clock, define, drive, monkeypatch
):
    """L4 + C2 + C3: when BEGIN itself refuses (too little lease left), the pass is an
    admission miss (L5), not throttled, and neither its slot nor its rate token is spent."""
    both = Limit(concurrency=1, rate=Rate(1, per=10 * SECOND))
    spec = define("t.c23.miss", handler, limit=both)
    start(spec)

    class Refusing:
        def run(self, *args, **kwargs):
            return 0

    monkeypatch.setattr(store_limits, "BEGIN_LIMITED", Refusing())
    report = drive(spec)
    assert (report.throttled, report.superseded, report.completed) == (0, 1, 0)
    assert not Slot.objects.filter(owner__isnull=False).exists()
    assert not RateState.objects.filter(tat__gt=frozen_clock.now()).exists()


# -- C3 rate ---


def test_c3_begins_are_spaced_per_over_n_on_the_database_clock(frozen_clock, drive):
    """C3: Rate(5, per=2 s) lets one pass begin each 0.4 s. Of 8 due runs one drive begins
    exactly one and throttles seven: the one it claimed is due again at the rate state's
    next allowed begin, the six it stepped over each 0.4 s (and the margin: ``SPACED``)
    after the one before (C4) -- none before the rate allows it. Throttled passes never
    charge an attempt or fail a run."""
    runs = [start(RATED, QUICK, instance=f"r{n}").run for n in range(8)]
    report = drive(RATED)
    assert (report.completed, report.throttled, report.attempted) == (1, 7, 1)
    tat = RateState.objects.get(job=RATED, key="").tat
    assert tat == frozen_clock.now() + timedelta(milliseconds=400)
    waiting = Run.objects.filter(job=RATED, status=RunStatus.RUNNING)
    dues = sorted(waiting.values_list("next_attempt_at", flat=True))
    assert dues == [tat + n * SPACED for n in range(7)]
    assert set(waiting.values_list("throttled_by", flat=True)) == {"rate"}

    for left, due in zip(range(6, -1, -1), dues, strict=True):
        frozen_clock.advance(due - frozen_clock.now() - timedelta(milliseconds=100))
        assert drive(RATED).attempted == 0  # not due before the rate allows a begin
        frozen_clock.advance(timedelta(milliseconds=100))
        report = drive(RATED)
        assert (report.completed, report.throttled) == (1, 0)
        assert RateState.objects.get(job=RATED).tat == frozen_clock.now() + 0.4 * SECOND
        assert waiting.count() == left

    finished = Run.objects.filter(pk__in=[run.pk for run in runs])
    assert set(finished.values_list("status", "attempts", "failure_code")) == {
        (RunStatus.DONE, 0, "")
    }
    assert set(finished.values_list("admission_misses", flat=True)) <= {None, 0}


def test_s13_c3_a_begin_of_a_rate_limited_backlog_rewrites_none_of_the_rest(frozen_clock, drive):
    """§13, C3: a backlog held back by its rate costs the same few writes a begin, whatever
    its size: each held-back run is due when the rate will let it begin, so a drive at
    that time begins it and moves no other run (held back all at one time, 600 runs were
    rewritten at every begin)."""

    def writes_per_begin(backlog):
        Run.objects.filter(job=RATED).delete()
        RateState.objects.all().delete()
        start_many(RATED, [(f"b{n}", QUICK) for n in range(backlog)])
        assert drive(RATED).completed == 1  # the first begins; the rest are held back, spaced
        held = dict(
            Run.objects.filter(job=RATED, status=RunStatus.RUNNING).values_list("pk", "updated_at")
        )
        frozen_clock.advance(SPACED)
        with CaptureQueriesContext(connection) as captured:
            report = drive(RATED)
        assert (report.completed, report.throttled) == (1, 0)
        after = dict(
            Run.objects.filter(job=RATED, status=RunStatus.RUNNING).values_list("pk", "updated_at")
        )
        assert len(after) == backlog - 2
        assert all(after[pk] == held[pk] for pk in after)  # not one of the rest was written
        return len(statements(captured))

    writes_per_begin(3)  # the process's first drive also does its housekeeping (D6)
    assert writes_per_begin(3) == writes_per_begin(60)


def test_c3_c4_a_later_drive_spaces_its_runs_after_those_held_back_before(frozen_clock, drive):
    """C3 + C4 + §13: runs held back by an earlier drive keep their times; the run a later
    drive's rate refuses, and then the runs it steps over, go after the last of them, one
    interval apart (and a margin: ``SPACED``), so none falls due together with those --
    two due together, one would be refused again, and the next, down the backlog."""
    start_many(RATED, [(f"a{n}", QUICK) for n in range(4)])
    drive(RATED)
    waiting = Run.objects.filter(job=RATED, status=RunStatus.RUNNING)
    first = dict(waiting.values_list("instance", "next_attempt_at"))
    assert sorted(first.values()) == [
        frozen_clock.now() + 0.4 * SECOND + (n - 1) * SPACED for n in (1, 2, 3)
    ]
    frozen_clock.advance(timedelta(milliseconds=400))
    start_many(RATED, [(f"b{n}", QUICK) for n in range(3)])
    Run.objects.filter(job=RATED, instance__startswith="b").update(
        next_attempt_at=frozen_clock.now() - SECOND  # due before the ones held back
    )
    report = drive(RATED)
    # b0 began; b1 was throttled; b2 and the first drive's run due now were stepped over.
    assert (report.completed, report.throttled) == (1, 3)
    now = dict(waiting.values_list("instance", "next_attempt_at"))
    last = max(first.values())
    assert now["b1"] == last + SPACED  # behind them, not at the rate's next begin
    assert sorted(now[name] for name in now if name != "b1")[-2:] == [
        last + 2 * SPACED,
        last + 3 * SPACED,
    ]
    ahead = {name: due for name, due in first.items() if due > frozen_clock.now()}
    assert {name: now[name] for name in ahead} == ahead  # still held back: not written


def test_c3_a_pass_refused_just_before_the_rates_next_begin_waits_for_it_and_begins(drive):
    """C3 + §13: refused by its rate a few milliseconds early -- the last begin was that
    much late -- a pass waits those milliseconds on its thread and begins, rather than
    being throttled and driven again a drive later (each begin would lose a drive). On
    the database's own clock; a machine so slow that the rate allowed it before it asked
    begins it as well. Refused by more than RATE_CATCH, the pass is throttled."""
    from django_leasejobs.admission import RATE_CATCH
    from django_leasejobs.clock import DbNow

    assert timedelta(milliseconds=40) < RATE_CATCH  # and RATED's interval is 400 ms
    soon = start(RATED, QUICK, instance="soon").run
    RateState.objects.create(job=RATED, key="", tat=timezone.now())
    RateState.objects.filter(job=RATED).update(tat=DbNow() + timedelta(milliseconds=40))
    report = drive(RATED)
    assert (report.completed, report.throttled) == (1, 0)
    assert fresh(soon).status == RunStatus.DONE

    later = start(RATED, QUICK, instance="later").run
    RateState.objects.filter(job=RATED).update(tat=DbNow() + timedelta(seconds=30))
    tat = RateState.objects.get(job=RATED).tat
    report = drive(RATED)
    assert (report.completed, report.throttled) == (0, 1)
    assert fresh(later).next_attempt_at == tat


def test_c3_each_key_has_its_own_rate(frozen_clock, define, drive):
    """C1 + C3: a rate per key: one begin per key per interval."""
    limit = Limit(rate=Rate(1, per=SECOND), key=lambda payload: payload["account"])
    spec = define("t.c3.keyed", handler, limit=limit)
    for account in "ab":
        for n in range(2):
            start(spec, {"account": account}, instance=f"{account}{n}")
    report = drive(spec)
    assert (report.completed, report.throttled) == (2, 2)
    assert set(RateState.objects.filter(job=spec.name).values_list("key", flat=True)) == {"a", "b"}


# -- C4 fairness ---


def test_c4_five_hundred_throttled_runs_ahead_do_not_hold_back_unlimited_runs(frozen_clock, drive):
    """C4 (as D2): 500 runs of a full limited job, first in due order, fill a whole
    snapshot (SCAN_MAX); each is throttled -- uncounted against the drive's limit, due
    again a second later -- so the next drive reaches the unlimited runs behind them."""
    now = frozen_clock.now()
    hold_slots(LIMITED, 2, until=now + timedelta(hours=1))
    start_many(LIMITED, [(f"l{n}", QUICK) for n in range(500)])
    Run.objects.filter(job=LIMITED, instance__startswith="l").update(
        next_attempt_at=now - timedelta(minutes=1)
    )
    noops = [
        result.run for result in start_many("tests.noop", [(f"n{n}", None) for n in range(40)])
    ]

    reports = []
    for _ in range(3):
        reports.append(drive(LIMITED, "tests.noop"))
        if not Run.objects.filter(job="tests.noop", status=RunStatus.RUNNING).exists():
            break
    assert Run.objects.filter(pk__in=[r.pk for r in noops], status=RunStatus.DONE).count() == 40
    assert len(reports) <= 3
    assert sum(report.completed for report in reports) == 40
    assert sum(report.attempted for report in reports) == 40
    assert reports[0].throttled == 500
    limited = Run.objects.filter(job=LIMITED, instance__startswith="l")
    assert set(limited.values_list("status", "attempts", "throttled_by")) == {
        (RunStatus.RUNNING, 0, "concurrency")
    }


def test_c4_throttled_passes_do_not_count_against_the_drives_limit(frozen_clock, drive):
    hold_slots(LIMITED, 2, until=frozen_clock.now() + timedelta(hours=1))
    for n in range(20):
        start(LIMITED, QUICK, instance=f"l{n}")
    frozen_clock.advance(timedelta(milliseconds=1))
    for n in range(10):
        start("tests.noop", instance=f"n{n}")
    report = drive(LIMITED, "tests.noop", limit=10)
    assert (report.throttled, report.attempted, report.completed) == (20, 10, 10)


# -- SPEC §13: the statements a limit adds, pinned ---


@pytest.fixture
def warm(drive):
    """One drive first, so the schedule rows of tests/jobs.py exist (as in test_driver.py)."""
    drive()


def limited_pass_statements(define, drive, limit, name):
    """The statements of one drive of one pass of a job limited by *limit*, its slot and
    rate rows already there (the first pass of a key creates them, once)."""
    spec = define(name, handler, limit=limit)
    if limit.concurrency:
        Slot.objects.bulk_create(
            [Slot(job=name, key="", number=n) for n in range(limit.concurrency)]
        )
    if limit.rate:
        RateState.objects.create(job=name, key="", tat=timezone.now() - timedelta(hours=1))
    run = start(spec).run
    with CaptureQueriesContext(connection) as queries:
        report = drive(spec)
    assert report.completed == 1
    assert fresh(run).status == RunStatus.DONE
    return statements(queries)


def test_budget_a_concurrency_limited_pass_costs_two_statements_more(define, drive, warm):
    """§13 + C2: the slot read and the slot's compare-and-set (in BEGIN's transaction).
    An unlimited pass costs ``DRIVE + one_pass()``: test_driver.py's test_budget_* pin it."""
    sent = limited_pass_statements(define, drive, Limit(concurrency=2), "t.budget.c2")
    assert len(sent) == DRIVE + one_pass() + 2, sent


def test_budget_a_rate_limited_pass_costs_one_statement_more(define, drive, warm):
    """§13 + C3: the rate state's conditional UPDATE."""
    sent = limited_pass_statements(define, drive, Limit(rate=Rate(5, per=SECOND)), "t.budget.c3")
    assert len(sent) == DRIVE + one_pass() + 1, sent


def test_budget_a_pass_limited_both_ways_costs_three_statements_more(define, drive, warm):
    limit = Limit(concurrency=2, rate=Rate(5, per=SECOND))
    sent = limited_pass_statements(define, drive, limit, "t.budget.c23")
    assert len(sent) == DRIVE + one_pass() + 3, sent


# -- C5 a limit changed in code ---


def test_c5_a_changed_limit_takes_effect_at_the_next_drive(frozen_clock, define, drive):
    """C5: limits are code, not rows. Shrunk to one slot, the job uses one; grown to
    three, the next drive creates the new slot rows -- no migration, no setup step."""
    name = "t.c5.change"
    define(name, handler, limit=Limit(concurrency=2))
    hold_slots(name, 1, until=frozen_clock.now() + timedelta(hours=1))  # slot 0 elsewhere
    first = start(name, instance="first").run
    assert drive(name).completed == 1  # slot 1 was free
    assert fresh(first).status == RunStatus.DONE

    registry.unregister(name)
    define(name, handler, limit=Limit(concurrency=1))
    waiting = start(name, instance="waiting").run
    assert drive(name).throttled == 1  # slot 0 is held: one slot is all there is now
    assert Slot.objects.filter(job=name).count() == 2

    registry.unregister(name)
    define(name, handler, limit=Limit(concurrency=3))
    hold_slots(name, 1, until=frozen_clock.now() + timedelta(hours=1), first=1)  # 0, 1 held
    frozen_clock.advance(SECOND)
    assert drive(name).completed == 1  # in slot 2, created by this drive
    assert fresh(waiting).status == RunStatus.DONE
    assert sorted(Slot.objects.filter(job=name).values_list("number", flat=True)) == [0, 1, 2]


# -- §14 + S7: retention prunes idle limit state ---


def test_c_retention_prunes_idle_slots_and_rate_states_and_keeps_held_ones(
    frozen_clock, drive, monkeypatch
):
    """S7 + §14: free slots and rate states already passed mean what a missing row means,
    so retention deletes them; a held slot and a rate state still ahead are kept."""
    from django_leasejobs.housekeeping import chores

    # This process's hourly prune has just run: the drive below must not prune again
    # (as it would, run first in a fresh process), or the slots it creates would go.
    monkeypatch.setattr(chores, "last_prune", time.monotonic())
    now = frozen_clock.now()
    (held,) = hold_slots(LIMITED, 1, until=now + timedelta(hours=1))
    hold_slots(KEYED, 1, until=now - SECOND, key="gone")  # its lease ran out
    Slot.objects.create(job=LIMITED, key="", number=1)  # never taken
    (done,) = hold_slots(KEYED, 1, until=now + timedelta(hours=1), key="done")
    Run.objects.filter(pk=done.pk).update(status=RunStatus.DONE, lease_owner=None, live_key=None)
    RateState.objects.create(job=RATED, key="", tat=now - SECOND)
    RateState.objects.create(job=RATED, key="ahead", tat=now + SECOND)

    prune(dry_run=True)
    assert Slot.objects.count() == 4  # a dry run deletes nothing
    assert RateState.objects.count() == 2

    prune()
    assert list(Slot.objects.values_list("run_id", flat=True)) == [held.pk]
    assert list(RateState.objects.values_list("key", flat=True)) == ["ahead"]

    run = start(KEYED, {"account": "gone", **QUICK}, instance="again").run
    # the new run, and the expired holder's run taken over (L3); the key's slots come back
    assert drive(KEYED).completed == 2
    assert fresh(run).status == RunStatus.DONE
    assert Slot.objects.filter(job=KEYED, key="gone").count() == 2


def _waiting_on_a_lock() -> bool:
    """Whether another session waits on a row lock (PostgreSQL), or runs a prune's locking
    read or delete of the slots (MariaDB), which only a lock holds up for long."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
        else:  # MariaDB lists a session waiting on a row lock as running its statement
            cursor.execute(
                "SELECT count(*) FROM information_schema.processlist "
                "WHERE (info LIKE %s OR info LIKE %s) AND id <> connection_id()",
                ["SELECT%leasejobs_slot%FOR UPDATE%", "DELETE%leasejobs_slot%"],
            )
        (waiting,) = cursor.fetchone()
    return waiting > 0


@pytest.mark.django_db(transaction=True)
def test_c2_retention_keeps_a_slot_taken_while_it_prunes():
    """C2 + S7: a prune that reaches a slot while a pass is taking it keeps the slot.

    The taker's transaction takes the slot and begins its pass; the prune, in
    another session, waits on that slot's row lock, and goes on once the taker
    commits. It must then see the pass begun and keep the slot: deleting it
    would give the key a fresh slot, and a third pass beside two (seen in CI
    as three overlapping handlers under concurrency 2).
    """
    import threading

    from django.db import connections, transaction

    from django_leasejobs.store.claims import BEGIN_LIMITED, claim

    if not connection.features.has_select_for_update:
        # SQLite: one writer at a time, so no prune can run inside a taker's
        # transaction; a slot held when it runs is kept (the test above).
        assert connection.vendor == "sqlite"
        return
    run = start(LIMITED, QUICK, instance="taker").run
    owner = new_owner()
    assert claim(run.pk, owner, timedelta(minutes=5), "host:1:2:x", takeover=False)
    for number in range(2):
        Slot.objects.create(job=LIMITED, key="", number=number)
    free = store_limits._free_slots(LIMITED, "", 2)
    taken, release, pruned = threading.Event(), threading.Event(), []

    def taker():
        try:
            with transaction.atomic():
                assert store_limits._take(free[:1], run.pk, owner)
                assert BEGIN_LIMITED.run("default", run_id=run.pk, owner=owner, margin=SECOND)
                taken.set()
                assert release.wait(60)
        finally:
            connections.close_all()

    def pruner():
        try:
            pruned.append(store_limits.prune_idle())
        finally:
            connections.close_all()

    taking = threading.Thread(target=taker)
    taking.start()
    assert taken.wait(60)
    pruning = threading.Thread(target=pruner)
    pruning.start()
    try:
        wait_for(_waiting_on_a_lock, "the prune to wait on the slot being taken", every=0.01)
    finally:
        release.set()
        taking.join(60)
        pruning.join(60)
    assert pruned  # it ran to the end
    (slot_pk, _seen) = free[0]
    assert Slot.objects.filter(pk=slot_pk, run_id=run.pk, owner=owner).exists()
    assert store_limits.slots_in_use(LIMITED) == {"": 1}
    assert Slot.objects.filter(job=LIMITED).count() == 1  # the other, free slot went
