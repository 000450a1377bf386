"""The drive, D1-D4, the kick, and the statement budget of SPEC §13."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import DatabaseError, connection
from django.test.utils import CaptureQueriesContext

from django_leasejobs import JobNotRegistered, RunStatus, run_due_jobs, start, store
from django_leasejobs.models import Run
from tests.factories import RunFactory
from tests.utils import fresh, statements

pytestmark = pytest.mark.django_db


# -- D1 snapshot ---


def test_d1_runs_are_driven_in_due_order(define, drive, frozen_clock):
    order = []
    spec = define("t.d1", lambda p: order.append(p.payload) or p.done())
    now = frozen_clock.now()
    for label, age in [("newest", 1), ("oldest", 30), ("middle", 10)]:
        run = start(spec, label, instance=label).run
        Run.objects.filter(pk=run.pk).update(next_attempt_at=now - timedelta(seconds=age))
    drive(spec)
    assert order == ["oldest", "middle", "newest"]


def test_d1_the_snapshot_is_one_range_read_capped_at_scan_max(define, drive, settings):
    settings.LEASEJOBS = {"SCAN_MAX": 7}
    spec = define("t.d1.scan", lambda p: p.done())
    for n in range(10):
        start(spec, instance=str(n))
    with CaptureQueriesContext(connection) as queries:
        report = drive(spec)
    assert report.completed == 7
    selects = [sql for sql in statements(queries) if "ORDER BY" in sql]
    assert len(selects) == 1
    snapshot = selects[0]
    assert '"status" = ' in snapshot.replace("`", '"')
    assert "next_attempt_at" in snapshot
    assert "IS NULL" not in snapshot  # one range, never an OR with IS NULL (SPEC §2)
    assert "LIMIT 7" in snapshot


def test_d1_a_run_claimed_elsewhere_since_the_snapshot_is_skipped(define, monkeypatch):
    calls = []
    spec = define("t.d1.raced", lambda p: calls.append(p.payload) or p.done())
    first = start(spec, "first", instance="a").run
    start(spec, "second", instance="b")
    from django_leasejobs import driver

    original = driver.snapshot

    def snapshot_then_lose_one(*args):
        keys = original(*args)
        assert store.claim(first.pk, "elsewhere", timedelta(minutes=1), "h", takeover=False)
        return keys

    monkeypatch.setattr(driver, "snapshot", snapshot_then_lose_one)
    report = run_due_jobs(jobs=[spec.name])
    assert calls == ["second"]
    assert report.attempted == 1
    assert fresh(first).lease_owner == "elsewhere"


# -- D2 unregistered runs and the limit ---


def test_d2_unregistered_runs_at_the_head_do_not_starve_a_registered_one(define, frozen_clock):
    spec = define("t.d2", lambda p: p.done())
    head = frozen_clock.now() - timedelta(hours=1)
    Run.objects.bulk_create(
        RunFactory.build(
            job="another.deployment",
            instance=f"orphan-{n}",
            started_at=head,
            updated_at=head,
            next_attempt_at=head,
        )
        for n in range(500)
    )
    mine = start(spec).run  # due now: behind all 500 in due order
    report = run_due_jobs()
    assert report.completed == 1
    assert fresh(mine).status == RunStatus.DONE
    orphans = Run.objects.filter(job="another.deployment")
    assert orphans.filter(status=RunStatus.RUNNING, attempts=0, lease_owner=None).count() == 500


def test_d2_limit_counts_runs_driven(define, drive):
    spec = define("t.d2.limit", lambda p: p.done())
    for n in range(5):
        start(spec, instance=str(n))
    report = drive(spec, limit=2)
    assert report.attempted == 2
    assert Run.objects.filter(job=spec.name, status=RunStatus.DONE).count() == 2


def test_d2_unknown_job_filter_lists_the_registered_jobs():
    with pytest.raises(JobNotRegistered, match=r"tests\.walk"):
        run_due_jobs(jobs=["nope"])


# -- D3 budget ---


def test_d3_max_passes_resumes_from_what_was_committed(define, drive):
    cursors = []

    def handler(p):
        cursors.append(p.cursor)
        return p.advance((p.cursor or 0) + 1)

    spec = define("t.d3", handler)
    run = start(spec).run
    report = drive(spec, max_passes=4)
    assert cursors == [None, 1, 2, 3]
    assert report.attempted == 1
    assert report.advanced == 4
    assert fresh(run).cursor == "4"
    drive(spec)  # default budget: one pass
    assert cursors[-1] == 4


# -- D4 isolation ---


def test_d4_a_database_error_on_one_run_is_reported_and_the_drive_goes_on(
    define, drive, monkeypatch, frozen_clock
):
    spec = define("t.d4", lambda p: p.done())
    broken = start(spec, instance="broken").run
    frozen_clock.advance(timedelta(seconds=1))
    fine = start(spec, instance="fine").run
    original = store.claim_and_read

    def flaky_take(run_id, *args, **kwargs):
        if run_id == broken.pk:
            raise DatabaseError("row is on fire")
        return original(run_id, *args, **kwargs)

    monkeypatch.setattr(store, "claim_and_read", flaky_take)
    report = drive(spec)
    assert report.completed == 1
    assert report.errors[0].run_id == broken.pk
    assert "row is on fire" in report.errors[0].text
    assert fresh(fine).status == RunStatus.DONE


def test_d4_a_failing_handler_never_raises_out_of_the_drive(define, drive):
    def handler(p):
        raise SystemError("bad")

    spec = define("t.d4.raise", handler)
    start(spec)
    report = drive(spec)
    assert report.retrying == 1


# -- the kick ---


def test_kick_many_joins_with_again_make_one_follow_up_with_the_latest_payload(
    define, drive, frozen_clock
):
    payloads = []

    def handler(p):
        payloads.append(p.payload)
        if p.payload == {"v": 0}:
            for version in range(1, 4):  # kicks while the run is live
                assert start(spec, {"v": version}, again=True).joined
        return p.done()

    spec = define("t.kick", handler)
    start(spec, {"v": 0})
    assert drive(spec).completed == 1
    follow_ups = Run.objects.filter(job=spec.name, status=RunStatus.RUNNING)
    assert follow_ups.count() == 1
    assert json.loads(follow_ups.get().payload) == {"v": 3}
    drive(spec)
    assert payloads == [{"v": 0}, {"v": 3}]
    assert Run.objects.filter(job=spec.name).count() == 2
    assert not Run.objects.filter(job=spec.name, status=RunStatus.RUNNING).exists()


def test_report_is_json_ready(define, drive):
    spec = define("t.report", lambda p: 1 / 0)
    run = start(spec).run
    data = drive(spec).as_dict()
    assert json.loads(json.dumps(data))["retrying"] == 1
    assert data["errors"] == [{"run_id": run.pk, "text": "ZeroDivisionError: division by zero"}]


# -- SPEC §13: statements per pass and per step, pinned ---

#: Reads a drive makes once, whatever it drives: the clock, the schedules (S1,
#: D6), the live runs of scheduled jobs (S6), the dead-holder scan (L9) and the
#: snapshot (D1).
DRIVE = 5


def claim_and_read():
    """L2 and its read-back: one statement where the backend returns the claimed row."""
    from django_leasejobs.store.sql import returns_rows

    return 1 if returns_rows("default") else 2


#: A pass: the claim (and its read-back, where it is a statement of its own),
#: BEGIN, and the commit.
def one_pass():
    return claim_and_read() + 2


def one_step():
    """R5 + L7: a step's renewal and record -- one statement on PostgreSQL, which carries
    the record in the renewal's CTE; elsewhere a transaction of the two."""
    return 1 if connection.vendor == "postgresql" else 2


def drop_ledger():
    """R3 + R5: a commit drops its pass's step ledger -- in the commit's own statement on
    PostgreSQL (a CTE); elsewhere one more statement, in the commit's transaction."""
    return 0 if connection.vendor == "postgresql" else 1


@pytest.fixture
def warm(drive):
    """One drive first, so the schedule rows of tests/jobs.py exist (S1 creates them once)."""
    drive()


def test_budget_a_no_op_pass_costs_three_statements_after_the_snapshot(define, drive, warm):
    spec = define("t.budget.noop", lambda p: p.advance(1))
    start(spec)
    with CaptureQueriesContext(connection) as queries:
        drive(spec)
    # per drive: DRIVE reads; per pass: claim (and read back), begin, commit
    assert len(statements(queries)) == DRIVE + one_pass(), statements(queries)


def test_budget_a_finishing_pass_costs_the_same(define, drive, warm):
    spec = define("t.budget.done", lambda p: p.done())
    start(spec)
    with CaptureQueriesContext(connection) as queries:
        drive(spec)
    assert len(statements(queries)) == DRIVE + one_pass(), statements(queries)


def test_budget_a_finishing_pass_with_steps_reads_nothing_back(define, drive, warm):
    def handler(p):
        p.step("only", lambda: 1)
        return p.done()

    spec = define("t.budget.done.steps", handler)
    start(spec)
    with CaptureQueriesContext(connection) as queries:
        drive(spec)
    # + the step, and the drop of the ledger; no read of the kick flag
    expected = DRIVE + one_pass() + one_step() + drop_ledger()
    assert len(statements(queries)) == expected, statements(queries)


def test_budget_each_new_step_costs_one_short_transaction(define, drive, warm):
    steps = 3

    def handler(p):
        for n in range(steps):
            p.step(f"s{n}", lambda n=n: n)
        return p.advance(1)

    spec = define("t.budget.steps", handler)
    start(spec)
    with CaptureQueriesContext(connection) as queries:
        drive(spec)
    # as above, + each step (renew + record), and the drop of the ledger at commit
    expected = DRIVE + one_pass() + steps * one_step() + drop_ledger()
    assert len(statements(queries)) == expected, statements(queries)


# -- §11 stranded rows ---


@pytest.fixture
def housekeeping_due(monkeypatch):
    """Make the next drive's per-minute housekeeping due (it runs once a minute per process)."""
    from django_leasejobs.housekeeping import chores

    monkeypatch.setattr(chores, "last_sweep", None)


def test_s11_stranded_rows_are_reported_in_the_drives_warnings(drive, housekeeping_due):
    never_due = start("tests.noop", instance="never").run
    Run.objects.filter(pk=never_due.pk).update(next_attempt_at=None)  # hand-edited
    odd = start("tests.noop", instance="odd").run
    Run.objects.filter(pk=odd.pk).update(status="paused")  # not a status of ours
    fine = start("tests.noop", instance="fine").run
    report = drive("tests.noop")
    warnings = {note.run_id: note.text for note in report.warnings}
    assert set(warnings) == {never_due.pk, odd.pk}
    assert "never due" in warnings[never_due.pk]
    assert "status 'paused' holds the live key" in warnings[odd.pk]
    assert fresh(fine).status == RunStatus.DONE
    assert start("tests.noop", instance="odd").joined  # until an operator cancels it


@pytest.mark.django_db
def test_d1_after_a_lost_claim_the_drive_moves_on_and_the_next_drive_takes_the_rest(
    define, drive, monkeypatch
):
    """A lost claim sends the drive further along its snapshot (away from the
    worker that won it); what it stepped over is still due, and taken next."""
    spec = define("t.d1.lost", lambda p: p.done())
    runs = [start(spec, instance=f"r{n}").run for n in range(30)]
    take = store.claim_and_read
    lost = []

    def take_but_lose_the_first(run_id, *args, **kwargs):
        if not lost:
            lost.append(run_id)
            return None  # as if another worker had claimed it a moment before
        return take(run_id, *args, **kwargs)

    monkeypatch.setattr(store, "claim_and_read", take_but_lose_the_first)
    monkeypatch.setattr("django_leasejobs.cursor.random.randrange", lambda n: 5)
    first = drive(spec)
    assert first.attempted == 29 - 5  # it stepped over five of the runs behind the lost one
    monkeypatch.setattr(store, "claim_and_read", take)
    while drive(spec).attempted:
        pass
    assert {fresh(run).status for run in runs} == {RunStatus.DONE}
