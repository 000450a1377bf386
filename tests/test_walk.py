"""``p.walk`` (SPEC §3, revision 4): a QuerySet walked in primary-key order, a batch a pass.

Each batch is the step ``walk:<first pk>`` (R5), so a batch done before a crash
-- a failed pass, a SIGKILLed worker -- is not done again; the cursor is the
last key done, stored as text when the key is not a JSON value (a UUID).
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_leasejobs import Retry, RunStatus, run_due_jobs, start
from django_leasejobs.clock import DatabaseClock
from django_leasejobs.models import Run, Step
from django_leasejobs.testing import drive_until_idle
from tests.jobs import _touch
from tests.models import Walked, WalkedByName, WalkedByUUID
from tests.processes import python
from tests.utils import fresh, statements, wait_for

pytestmark = pytest.mark.django_db

NO_JITTER = Retry(max_attempts=3, base=timedelta(seconds=10), cap=timedelta(minutes=1), jitter=0)


def walking(define, queryset, *, size, total=False, seen=None, name="t.walk"):
    """Define a job whose handler returns ``p.walk(queryset(), touch, ...)``; *seen* gets
    each batch's keys as the function is called."""

    def touch(batch):
        if seen is not None:
            seen.append([row.pk for row in batch])
        _touch(batch)

    return define(name, lambda p: p.walk(queryset(), touch, size=size, total=total))


def walked_to_the_end(spec):
    """Start a run of *spec* and drive it until it is done: the run as stored after."""
    run = start(spec).run
    report = drive_until_idle(jobs=[spec.name])
    assert not report.errors, report.errors
    done = fresh(run)
    assert done.status == RunStatus.DONE
    return done, report


def counts(captured):
    """The ``COUNT`` reads of the walked table among *captured*'s statements."""
    table = Walked._meta.db_table
    return [sql for sql in statements(captured) if "COUNT(" in sql.upper() and table in sql]


def counters(run):
    return json.loads(run.counters)


# -- integer, string and UUID keys ---------------------------------------------------------------


def test_s3_walk_visits_integer_keys_once_each_in_key_order_a_batch_a_pass(define):
    Walked.objects.bulk_create([Walked(pk=pk) for pk in (5, 1, 7, 3, 2, 6, 4)])
    seen = []
    spec = walking(define, Walked.objects.all, size=3, seen=seen)

    run, report = walked_to_the_end(spec)

    assert seen == [[1, 2, 3], [4, 5, 6], [7]]
    assert report.advanced == 2  # the third batch is short: done, not advanced
    assert report.completed == 1
    assert counters(run) == {"walked": 7}
    assert json.loads(run.cursor) == 6  # done() keeps the last committed cursor (R3)
    assert set(Walked.objects.values_list("touched", flat=True)) == {1}


def test_s3_walk_visits_text_keys_in_key_order_whatever_the_querysets_own_ordering(define):
    names = ["pear", "fig", "kiwi", "apple", "lime", "date", "plum"]
    WalkedByName.objects.bulk_create([WalkedByName(name=n) for n in names])
    seen = []
    spec = walking(
        define, lambda: WalkedByName.objects.order_by("-touched", "-name"), size=2, seen=seen
    )

    run, _report = walked_to_the_end(spec)

    ordered = list(WalkedByName.objects.order_by("pk").values_list("pk", flat=True))
    assert [key for batch in seen for key in batch] == ordered
    assert [len(batch) for batch in seen] == [2, 2, 2, 1]
    assert counters(run) == {"walked": 7}
    assert set(WalkedByName.objects.values_list("touched", flat=True)) == {1}


def test_s3_walk_keeps_a_uuid_key_as_text_and_compares_it_as_a_uuid(define):
    WalkedByUUID.objects.bulk_create([WalkedByUUID(id=uuid.uuid4()) for _ in range(5)])
    # In the database's order, which is not always Python's: MariaDB's UUID type sorts
    # by its own byte order. The walk follows the database, as pk__gt compares there.
    keys = list(WalkedByUUID.objects.order_by("pk").values_list("pk", flat=True))
    seen = []
    spec = walking(define, WalkedByUUID.objects.all, size=2, seen=seen)
    run = start(spec).run

    run_due_jobs(jobs=[spec.name])
    assert json.loads(fresh(run).cursor) == str(keys[1])  # text: a UUID is not JSON (R2)
    drive_until_idle(jobs=[spec.name])

    assert fresh(run).status == RunStatus.DONE
    assert [key for batch in seen for key in batch] == keys
    assert [len(batch) for batch in seen] == [2, 2, 1]
    assert set(WalkedByUUID.objects.values_list("touched", flat=True)) == {1}


# -- where a walk ends ---------------------------------------------------------------------------


def test_s3_walk_over_an_empty_table_is_done_in_one_pass_without_calling_fn(define):
    seen = []
    spec = walking(define, Walked.objects.all, size=3, seen=seen)

    run, report = walked_to_the_end(spec)

    assert seen == []
    assert report.attempted == report.completed == 1
    assert counters(run) == {}
    assert run.cursor is None


def test_s3_a_table_of_an_exact_multiple_of_size_ends_with_an_empty_batch(define):
    Walked.objects.bulk_create([Walked(pk=pk) for pk in range(1, 7)])
    seen = []
    spec = walking(define, Walked.objects.all, size=3, seen=seen)

    run, report = walked_to_the_end(spec)

    assert seen == [[1, 2, 3], [4, 5, 6]]  # the third pass read nothing, and called nothing
    assert report.advanced == 2
    assert report.completed == 1
    assert counters(run) == {"walked": 6}
    assert set(Walked.objects.values_list("touched", flat=True)) == {1}


def test_s3_walk_of_a_filter_its_own_work_changes_does_each_row_once(define):
    """The usual backfill: walk the rows still to fix; fixing them takes them out of it."""
    Walked.objects.bulk_create([Walked(pk=pk, touched=pk % 2) for pk in range(1, 11)])
    seen = []
    spec = walking(define, lambda: Walked.objects.filter(touched=0), size=2, seen=seen)

    run, _report = walked_to_the_end(spec)

    assert seen == [[2, 4], [6, 8], [10]]
    assert counters(run) == {"walked": 5}
    assert set(Walked.objects.values_list("touched", flat=True)) == {1}


def test_s3_total_true_sets_the_runs_total_from_the_queryset_on_the_first_pass_only(define):
    Walked.objects.bulk_create([Walked(pk=pk, touched=pk % 3) for pk in range(1, 11)])
    spec = define(
        "t.walk_total",
        lambda p: p.walk(Walked.objects.filter(touched=0), _touch, size=2, total=True),
    )
    run = start(spec).run
    with CaptureQueriesContext(connection) as first:
        run_due_jobs(jobs=[spec.name])
    assert fresh(run).progress_total == 3  # rows 3, 6 and 9: the queryset's count
    assert len(counts(first)) == 1

    Walked.objects.filter(pk=1).update(touched=0)  # a row joins the queryset, behind the cursor
    with CaptureQueriesContext(connection) as second:
        run_due_jobs(jobs=[spec.name])
    assert counts(second) == []
    done = fresh(run)
    assert done.status == RunStatus.DONE
    assert done.progress_total == 3  # counted once, on the pass whose cursor was None
    assert counters(done) == {"walked": 3}


# -- a batch done before a crash is not done again (R5) ------------------------------------------


def test_r5_a_batch_whose_pass_failed_after_its_step_is_not_done_again(define, frozen_clock):
    Walked.objects.bulk_create([Walked(pk=pk) for pk in range(1, 8)])
    seen = []

    def touch(batch):
        seen.append([row.pk for row in batch])
        _touch(batch)

    def handler(p):
        walked = p.walk(Walked.objects.all(), touch, size=3)
        if p.cursor == 3 and p.attempt == 1:
            raise RuntimeError("the pass fails between its batch's step and its commit")
        return walked

    spec = define("t.walk_fails", handler, retry=NO_JITTER)
    run = start(spec).run
    run_due_jobs(jobs=[spec.name])
    run_due_jobs(jobs=[spec.name])
    failed = fresh(run)
    assert failed.attempts == 1
    assert json.loads(failed.cursor) == 3
    assert Step.objects.filter(run=run, name="walk:4", result__isnull=False).exists()

    frozen_clock.set(failed.next_attempt_at)
    drive_until_idle(jobs=[spec.name])

    assert seen == [[1, 2, 3], [4, 5, 6], [7]]  # [4, 5, 6] once: its replay called nothing
    done = fresh(run)
    assert done.status == RunStatus.DONE
    assert counters(done) == {"walked": 7}
    assert set(Walked.objects.values_list("touched", flat=True)) == {1}


def test_r5_a_replayed_batch_goes_on_from_the_last_key_it_stored(define, frozen_clock):
    """Rows that joined the batch's range after it was done do not drag the cursor back."""
    WalkedByName.objects.bulk_create([WalkedByName(name=n) for n in ("a", "c", "e", "g")])

    def handler(p):
        walked = p.walk(WalkedByName.objects.all(), _touch, size=3)
        if p.attempt == 1:
            raise RuntimeError("fails after the step")
        return walked

    spec = define("t.walk_replay", handler, retry=NO_JITTER)
    run = start(spec).run
    run_due_jobs(jobs=[spec.name])
    WalkedByName.objects.create(name="b")  # the replay reads a, b, c: still first key "a"

    frozen_clock.set(fresh(run).next_attempt_at)
    run_due_jobs(jobs=[spec.name])

    assert json.loads(fresh(run).cursor) == "e"  # from the stored step, not the batch read now
    drive_until_idle(jobs=[spec.name])
    touched = dict(WalkedByName.objects.values_list("name", "touched"))
    assert touched == {"a": 1, "b": 0, "c": 1, "e": 1, "g": 1}  # "e" not done twice


@pytest.mark.django_db(transaction=True)
@pytest.mark.concurrency
@pytest.mark.parametrize("max_passes", [1, 10], ids=["a pass a drive", "passes gone on with"])
def test_r5_a_worker_killed_between_a_batchs_step_and_its_commit_does_not_redo_it(max_passes):
    """R5 + L3: killed in the second batch's pass -- claimed by its own drive, or claimed
    and begun in the first batch's commit (django_leasejobs/going_on.py) -- the takeover
    replays that batch's step from the ledger and does no row twice."""
    Walked.objects.bulk_create([Walked(pk=pk) for pk in range(1, 9)])
    run = start("tests.walk_killed", {"hang_after": 3}).run
    worker = python(
        "from django_leasejobs import run_due_jobs\n"
        f"while True: run_due_jobs(jobs=['tests.walk_killed'], max_passes={max_passes})"
    )
    try:
        wait_for(
            lambda: Step.objects.filter(run=run, name="walk:4", result__isnull=False).exists(),
            "the second batch's step to be recorded",
            worker=worker,
        )
        assert Walked.objects.filter(touched=1).count() == 6
    finally:
        worker.kill()  # SIGKILL between the step and the commit: no outcome written
        worker.communicate(timeout=60)

    crashed = Run.objects.get(pk=run.pk)
    assert crashed.status == RunStatus.RUNNING
    assert json.loads(crashed.cursor) == 3  # the commit of [4, 5, 6] never happened
    clock = DatabaseClock()
    wait_for(lambda: Run.objects.due(clock.now_expr()).filter(pk=run.pk).exists(), "expiry")
    report = drive_until_idle(jobs=["tests.walk_killed"])

    assert not report.errors, report.errors
    done = Run.objects.get(pk=run.pk)
    assert done.status == RunStatus.DONE
    assert counters(done) == {"walked": 8}
    assert list(Walked.objects.order_by("pk").values_list("touched", flat=True)) == [1] * 8


# -- what it costs --------------------------------------------------------------------------------


def test_s13_a_walk_pass_costs_one_select_beyond_the_step_it_records(define):
    """§13: one ``SELECT`` a batch; everything else is the step's own (and the pass's)."""
    Walked.objects.bulk_create([Walked(pk=pk) for pk in range(1, 8)])
    by_hand = define(
        "t.by_hand",
        lambda p: (p.step("walk:1", lambda: None), p.count("walked", 3), p.advance(3))[-1],
    )
    walks = walking(define, Walked.objects.all, size=3)
    run_due_jobs(jobs=[by_hand.name])  # a first drive writes the schedule rows (S1): not a pass's
    start(by_hand)
    start(walks)

    with CaptureQueriesContext(connection) as hand:
        run_due_jobs(jobs=[by_hand.name])
    for _pass in range(2):  # the first batch, and one after a cursor
        with CaptureQueriesContext(connection) as walk:
            run_due_jobs(jobs=[walks.name])
        table = Walked._meta.db_table
        reads = [sql for sql in statements(walk) if sql.startswith("SELECT") and table in sql]
        assert len(reads) == 1, reads
        assert "ORDER BY" in reads[0]
        assert "LIMIT 3" in reads[0]
        # The batch's UPDATE is the function's own work, not the walk's.
        own = [sql for sql in statements(walk) if table not in sql]
        assert len(own) == len(statements(hand))


# -- what cannot be walked -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("queryset", "size", "error"),
    [
        (lambda: Walked.objects, 3, "walk() takes a QuerySet, got Manager (a manager: pass .all()"),
        (lambda: [Walked(pk=1)], 3, "walk() takes a QuerySet, got list"),
        (lambda: Walked.objects.all()[:5], 3, "cannot walk a sliced QuerySet"),
        (lambda: Walked.objects.values("pk"), 3, "without values() / values_list()"),
        (lambda: Walked.objects.values_list("pk"), 3, "without values() / values_list()"),
        (
            lambda: Walked.objects.filter(pk=1).union(Walked.objects.filter(pk=2)),
            3,
            "cannot walk a combined QuerySet (union())",
        ),
        (Walked.objects.all, 0, "size= as an int of at least 1, got 0"),
        (Walked.objects.all, -5, "size= as an int of at least 1, got -5"),
        (Walked.objects.all, True, "size= as an int of at least 1, got True"),
        (Walked.objects.all, 2.5, "size= as an int of at least 1, got 2.5"),
        (Walked.objects.all, "10", "size= as an int of at least 1, got '10'"),
    ],
    ids=[
        "a manager",
        "a list",
        "sliced",
        "values",
        "values_list",
        "union",
        "size 0",
        "size -5",
        "size True",
        "size 2.5",
        "size '10'",
    ],
)
def test_s3_what_cannot_be_walked_fails_the_pass_with_a_clear_error_and_reads_nothing(
    define, queryset, size, error
):
    Walked.objects.bulk_create([Walked(pk=pk) for pk in range(1, 4)])
    spec = define("t.walk_refused", lambda p: p.walk(queryset(), _touch, size=size))
    run = start(spec).run

    with CaptureQueriesContext(connection) as captured:
        run_due_jobs(jobs=[spec.name])

    failed = fresh(run)
    assert failed.attempts == 1
    assert error in failed.last_error
    assert json.loads(failed.counters) == {}
    assert failed.cursor is None
    assert set(Walked.objects.values_list("touched", flat=True)) == {0}
    assert not [sql for sql in statements(captured) if Walked._meta.db_table in sql]


def test_s3_total_must_be_a_bool(define):
    spec = define("t.walk_total_refused", lambda p: p.walk(Walked.objects.all(), _touch, total=1))
    run = start(spec).run
    run_due_jobs(jobs=[spec.name])
    assert "walk() takes total= as a bool, got 1" in fresh(run).last_error


def test_s3_a_cursor_that_is_not_a_key_of_the_model_is_named_as_such(define):
    """A run whose cursor another job wrote (a dict) fails clearly, not deep in the ORM."""

    def handler(p):
        if p.cursor is None:
            return p.advance({"page": 2})
        return p.walk(WalkedByUUID.objects.all(), _touch)

    spec = define("t.walk_foreign_cursor", handler)
    run = start(spec).run
    run_due_jobs(jobs=[spec.name])
    run_due_jobs(jobs=[spec.name])
    assert "the run's cursor is not a primary key of WalkedByUUID (a dict)" in fresh(run).last_error


def test_s3_a_text_key_too_long_for_a_step_name_is_named_by_its_prefix_and_a_digest():
    from django_leasejobs.models import STEP_NAME_LENGTH
    from django_leasejobs.walking import Walk

    walk = Walk.over(WalkedByName.objects.all(), 10)
    one, other = (WalkedByName(name="k" * 300 + end) for end in ("1", "2"))

    names = {walk.step_name(one), walk.step_name(other)}
    assert len(names) == 2  # the same 150-character prefix, told apart by the digest
    assert all(name.startswith("walk:" + "k" * 150) for name in names)
    assert all(len(name) <= STEP_NAME_LENGTH for name in names)
    assert walk.step_name(WalkedByName(name="short")) == "walk:short"
