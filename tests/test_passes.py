"""The pass: R3-R10, driven through run_due_jobs() on the test database."""

from __future__ import annotations

import contextlib
import datetime
import json
from datetime import timedelta

import pytest

from django_leasejobs import (
    Defer,
    LeaseJobsError,
    PassTimedOut,
    Retry,
    RunStatus,
    StepReused,
    start,
)
from django_leasejobs.models import Run, Step
from tests.utils import fresh

pytestmark = pytest.mark.django_db

NO_JITTER = Retry(max_attempts=3, base=timedelta(seconds=10), cap=timedelta(minutes=1), jitter=0)


def make_due(run, clock):
    """Move the frozen clock to when *run* is next due."""
    clock.set(fresh(run).next_attempt_at)


# -- R3 commit ---


def test_r3_commit_writes_cursor_counters_and_resets_failure(define, drive, frozen_clock):
    calls = []

    def handler(p):
        calls.append(p.cursor)
        p.count("items", 10)
        p.count("pages")
        if len(calls) == 1:
            raise RuntimeError("first pass fails")
        return p.advance({"page": 2})

    spec = define("t.r3", handler, retry=NO_JITTER)
    run = start(spec).run
    drive(spec)
    failed = fresh(run)
    assert failed.attempts == 1
    assert failed.failure_code == "handler_failed"
    make_due(run, frozen_clock)
    report = drive(spec)
    assert report.advanced == 1
    committed = fresh(run)
    assert json.loads(committed.cursor) == {"page": 2}
    assert json.loads(committed.counters) == {"items": 10, "pages": 1}
    assert committed.attempts == 0
    assert committed.failure_code == ""
    assert committed.last_error == ""
    assert committed.status == RunStatus.RUNNING
    assert committed.next_attempt_at == frozen_clock.now()  # due again now (L8)


def test_r3_commit_drops_the_step_ledger_in_the_same_transaction(define, drive):
    def handler(p):
        p.step(f"a:{p.cursor}", lambda: 1)
        return p.advance((p.cursor or 0) + 1)

    spec = define("t.r3.ledger", handler)
    run = start(spec).run
    drive(spec)
    assert not Step.objects.filter(run=run).exists()
    assert fresh(run).cursor == "1"


def test_r3_returning_none_keeps_the_cursor(define, drive, frozen_clock):
    cursors = []

    def handler(p):
        cursors.append(p.cursor)
        p.count("n")
        if p.cursor is None:
            return p.advance("first")
        return None

    spec = define("t.r3.none", handler)
    run = start(spec).run
    drive(spec, max_passes=3)
    assert cursors == [None, "first", "first"]
    after = fresh(run)
    assert after.cursor == '"first"'
    assert json.loads(after.counters) == {"n": 3}
    assert after.status == RunStatus.RUNNING


def test_r3_a_handler_that_forgets_to_return_is_reported_once_after_the_documented_passes(
    define, drive, caplog
):
    """R3 keeps the cursor of a pass that returns None; 100 such passes in a row with no
    step recorded (IDLE_PASSES_WARN) are reported once: a log warning, the drive's
    warnings, and the run's ``idle_passes`` for the admin. The run goes on as R3 says."""
    from django_leasejobs.passes import IDLE_PASSES_WARN

    def forgetful(p):
        p.count("calls")  # counts, but returns nothing: the cursor never moves

    spec = define("t.r3.forgets", forgetful)
    run = start(spec).run
    with caplog.at_level("WARNING", logger="django_leasejobs"):
        report = drive(spec, max_passes=IDLE_PASSES_WARN + 20)
    assert report.advanced == IDLE_PASSES_WARN + 20  # still R3: each pass committed
    warned = [note for note in report.warnings if "forget to return" in note.text]
    assert [note.run_id for note in warned] == [run.pk]
    assert f"{IDLE_PASSES_WARN} passes in a row" in warned[0].text
    logged = [r for r in caplog.records if "forget to return" in r.getMessage()]
    assert len(logged) == 1
    assert run.pk in logged[0].getMessage()
    stored = fresh(run)
    assert stored.idle_passes == IDLE_PASSES_WARN + 20
    assert stored.status == RunStatus.RUNNING
    assert json.loads(stored.counters) == {"calls": IDLE_PASSES_WARN + 20}


def test_r3_a_pass_that_moves_the_cursor_or_records_a_step_is_not_idle(define, drive):
    """Only passes that change nothing count: a new cursor, or a step, sets the count to 0."""

    def handler(p):
        if p.payload == "step" and p.attempt == 1:
            p.step(f"s{p.counters.get('n', 0)}", lambda: 1)
        p.count("n")
        if p.payload == "advance":
            return p.advance(p.counters["n"])
        return None

    spec = define("t.r3.busy", handler)
    runs = [start(spec, kind, instance=kind).run for kind in ("advance", "step", "none")]
    report = drive(spec, max_passes=5)
    assert report.advanced == 15
    assert [fresh(run).idle_passes for run in runs] == [0, 0, 5]
    assert not report.warnings


def test_r3_explicit_none_cursor_restarts_while_omitted_keeps(define, drive):
    seen = []

    def handler(p):
        seen.append(p.cursor)
        if len(seen) == 1:
            return p.advance(5)
        if len(seen) == 2:
            return None  # omitted: keep 5
        if len(seen) == 3:
            return p.advance(None)  # explicit None: start over
        return p.done()

    spec = define("t.r3.restart", handler)
    run = start(spec).run
    drive(spec, max_passes=4)
    assert seen == [None, 5, 5, None]
    assert fresh(run).cursor == "null"  # a real cursor, not SQL NULL
    assert fresh(run).status == RunStatus.DONE


def test_r3_done_stamps_ended_and_frees_the_key(define, drive, frozen_clock):
    spec = define("t.r3.done", lambda p: p.done())
    run = start(spec).run
    report = drive(spec)
    assert report.completed == 1
    done = fresh(run)
    assert done.status == RunStatus.DONE
    assert done.ended_at == frozen_clock.now()
    assert done.live_key is None
    assert done.next_attempt_at is None
    assert done.lease_owner is None
    assert not start(spec).joined


def test_r3_progress_total_is_committed(define, drive):
    def handler(p):
        p.total(250)
        return p.advance(1)

    spec = define("t.r3.total", handler)
    run = start(spec).run
    drive(spec)
    assert fresh(run).progress_total == 250


# -- R4 failure ---


def test_r4_failed_pass_writes_nothing_the_handler_produced(define, drive, frozen_clock):
    def handler(p):
        p.step(f"kept:{p.cursor}", lambda: "done once")
        p.count("items", 5)
        raise ValueError("upstream said no")

    spec = define("t.r4", handler, retry=NO_JITTER)
    run = start(spec).run
    Run.objects.filter(pk=run.pk).update(cursor='"c7"', counters='{"items": 1}')
    report = drive(spec)
    assert report.retrying == 1
    assert report.errors[0].run_id == run.pk
    after = fresh(run)
    assert after.cursor == '"c7"'
    assert after.counters == '{"items": 1}'
    assert after.attempts == 1
    assert after.failure_code == "handler_failed"
    assert after.last_error == "ValueError: upstream said no"
    assert after.next_attempt_at == frozen_clock.now() + timedelta(seconds=10)
    assert after.lease_owner is None
    assert list(Step.objects.filter(run=run).values_list("name", "result")) == [
        ("kept:c7", '"done once"')
    ]


def test_r4_backoff_doubles_and_the_run_fails_at_max_attempts(define, drive, frozen_clock):
    def handler(p):
        raise RuntimeError("always")

    spec = define("t.r4.max", handler, retry=NO_JITTER)
    run = start(spec).run
    waits = []
    for _ in range(2):
        before = frozen_clock.now()
        assert drive(spec).retrying == 1
        waits.append(fresh(run).next_attempt_at - before)
        make_due(run, frozen_clock)
    report = drive(spec)
    assert waits == [timedelta(seconds=10), timedelta(seconds=20)]
    assert report.failed == 1
    failed = fresh(run)
    assert failed.status == RunStatus.FAILED
    assert failed.attempts == 3
    assert failed.ended_at == frozen_clock.now()
    assert failed.live_key is None
    assert failed.last_error == "RuntimeError: always"


def test_r4_redacted_errors_keep_only_the_type(define, drive, settings):
    settings.LEASEJOBS = {"REDACT_ERRORS": True}

    def handler(p):
        raise PermissionError("token=s3cr3t")

    spec = define("t.r4.redact", handler)
    run = start(spec).run
    report = drive(spec)
    assert fresh(run).last_error == "PermissionError"
    assert "s3cr3t" not in json.dumps(report.as_dict())


def test_r4_error_text_is_truncated(define, drive, settings):
    settings.LEASEJOBS = {"ERROR_MAX_LENGTH": 40}

    def handler(p):
        raise RuntimeError("x" * 500)

    spec = define("t.r4.long", handler)
    run = start(spec).run
    drive(spec)
    assert len(fresh(run).last_error) == 40


# -- R5 steps ---


def test_r5_completed_step_is_not_rerun_after_a_later_step_fails(define, drive, frozen_clock):
    executed = []

    def handler(p):
        p.step("fetch", lambda: executed.append("fetch") or {"rows": 3})
        p.step("save", lambda: executed.append("save") or 1 / (len(executed) - 2))
        return p.done()

    spec = define("t.r5", handler, retry=NO_JITTER)
    run = start(spec).run
    assert drive(spec).retrying == 1
    make_due(run, frozen_clock)
    assert drive(spec).completed == 1
    assert executed == ["fetch", "save", "save"]


def test_r5_step_result_returned_through_stored_form(define, drive, frozen_clock):
    seen = []

    def handler(p):
        value = p.step(
            "when",
            lambda: {
                "at": datetime.datetime(2026, 5, 1, 12, 0, tzinfo=datetime.UTC),
                "pair": (1, 2),
                "n": 1,
            },
        )
        seen.append(value)
        if len(seen) == 1:
            raise RuntimeError("fail after the step, so the next pass replays it")
        return p.done()

    spec = define("t.r5.shape", handler, retry=NO_JITTER)
    run = start(spec).run
    drive(spec)
    make_due(run, frozen_clock)
    drive(spec)
    # The first call already sees what a replay will: a string, a list.
    assert seen[0] == seen[1] == {"at": "2026-05-01T12:00:00Z", "pair": [1, 2], "n": 1}


def test_r5_none_result_counts_as_completed(define, drive, frozen_clock):
    calls = []

    def handler(p):
        p.step("effect", lambda: calls.append(1))
        if len(calls) == 1 and p.attempt == 1:
            raise RuntimeError("later failure")
        return p.done()

    spec = define("t.r5.none", handler, retry=NO_JITTER)
    run = start(spec).run
    drive(spec)
    assert Step.objects.get(run=run).result == "null"
    make_due(run, frozen_clock)
    drive(spec)
    assert calls == [1]


def test_r5_raising_step_records_the_attempt_and_fails_the_pass(define, drive):
    def handler(p):
        p.step("boom", lambda: {}["missing"])
        return p.done()

    spec = define("t.r5.raise", handler, retry=NO_JITTER)
    run = start(spec).run
    assert drive(spec).retrying == 1
    step = Step.objects.get(run=run)
    assert step.result is None
    assert step.attempts == 1
    assert step.last_error == "step 'boom' failed: KeyError: 'missing'"
    assert fresh(run).last_error == step.last_error


def test_r5_caught_step_failure_still_fails_the_pass(define, drive):
    def handler(p):
        with contextlib.suppress(Exception):
            p.step("boom", lambda: 1 / 0)
        return p.done()

    spec = define("t.r5.caught", handler, retry=NO_JITTER)
    run = start(spec).run
    assert drive(spec).retrying == 1
    assert fresh(run).status == RunStatus.RUNNING


def test_r5_unencodable_result_fails_the_step_naming_it(define, drive):
    class Opaque:
        pass

    spec = define("t.r5.opaque", lambda p: p.step("bad", Opaque) and p.done(), retry=NO_JITTER)
    run = start(spec).run
    drive(spec)
    step = Step.objects.get(run=run)
    assert step.result is None
    assert "Opaque" in step.last_error
    assert "JSON cannot store" in step.last_error


def test_r5_spent_step_fails_without_calling_fn(define, drive):
    calls = []

    def handler(p):
        p.step("spent", lambda: calls.append(1))
        return p.done()

    spec = define("t.r5.spent", handler, retry=NO_JITTER)
    run = start(spec).run
    Step.objects.create(
        run=run, name="spent", result=None, attempts=3, last_error="old", recorded_at=run.started_at
    )
    Run.objects.filter(pk=run.pk).update(has_steps=True)
    report = drive(spec)
    assert calls == []
    assert report.failed == 1
    assert fresh(run).failure_code == "step_exhausted"


# -- R6, R7 ---


def test_r6_step_reused_in_one_pass_is_refused(define, drive):
    def handler(p):
        p.step("same", lambda: 1)
        p.step("same", lambda: 2)
        return p.done()

    spec = define("t.r6", handler, retry=NO_JITTER)
    run = start(spec).run
    drive(spec)
    assert "StepReused" in fresh(run).last_error
    assert "'same'" in fresh(run).last_error
    with pytest.raises(StepReused):
        raise StepReused("x")


def test_r7_step_policy_judges_exhaustion_by_the_steps_own_count(define, drive, frozen_clock):
    step_policy = Retry(
        max_attempts=2, base=timedelta(seconds=3), cap=timedelta(seconds=3), jitter=0
    )

    def handler(p):
        p.step("flaky", lambda: 1 / 0, retry=step_policy)
        return p.done()

    spec = define("t.r7", handler, retry=Retry(max_attempts=10, jitter=0))
    run = start(spec).run
    before = frozen_clock.now()
    assert drive(spec).retrying == 1
    assert fresh(run).next_attempt_at == before + timedelta(seconds=3)  # the step's backoff
    make_due(run, frozen_clock)
    assert drive(spec).failed == 1
    failed = fresh(run)
    assert failed.failure_code == "step_exhausted"
    assert failed.attempts == 2  # the run still counts consecutive failed passes


# -- R8 defer ---


def test_r8_defer_charges_nothing_and_sets_the_next_attempt(define, drive, frozen_clock):
    def handler(p):
        raise Defer(timedelta(minutes=2), "rate limited")

    spec = define("t.r8", handler)
    run = start(spec).run
    Run.objects.filter(pk=run.pk).update(attempts=2, failure_code="handler_failed", last_error="x")
    report = drive(spec)
    assert report.deferred == 1
    assert report.errors == []
    after = fresh(run)
    assert after.attempts == 2
    assert after.failure_code == "handler_failed"
    assert after.last_error == "x"
    assert after.next_attempt_at == frozen_clock.now() + timedelta(minutes=2)
    assert after.lease_owner is None


# -- R9 containment ---


def test_r9_malformed_row_fails_alone_and_the_runs_after_it_complete(define, drive, frozen_clock):
    spec = define("t.r9", lambda p: p.done(), retry=Retry(max_attempts=2, jitter=0))
    bad = start(spec, instance="bad").run
    Run.objects.filter(pk=bad.pk).update(cursor="{broken")
    frozen_clock.advance(timedelta(seconds=1))
    good = [start(spec, instance=f"good-{n}").run for n in range(3)]
    report = drive(spec)
    assert report.retrying == 1
    assert report.completed == 3
    assert all(fresh(run).status == RunStatus.DONE for run in good)
    broken = fresh(bad)
    assert broken.failure_code == "decode_failed"
    assert "cursor" in broken.last_error
    make_due(bad, frozen_clock)
    assert drive(spec).failed == 1
    assert fresh(bad).status == RunStatus.FAILED


def test_r9_counters_that_are_not_numbers_fail_the_pass(define, drive):
    spec = define("t.r9.counters", lambda p: p.done())
    run = start(spec).run
    Run.objects.filter(pk=run.pk).update(counters='{"a": "x"}')
    drive(spec)
    assert fresh(run).failure_code == "decode_failed"


# -- R10 timeout ---


def test_r10_timeout_at_a_step_boundary_fails_with_timeout(one_pass, worker_clock):
    def minute_of_work():
        worker_clock.now += 60

    def handler(p):
        for n in range(5):
            p.step(f"s{n}", minute_of_work)
        return p.done()

    _report, after = one_pass("t.r10", handler, timeout=timedelta(seconds=90), retry=NO_JITTER)
    assert (after.failure_code, after.cursor) == ("timeout", None)
    # s0 and s1 ran (0 s and 60 s in); at s2's boundary 120 s > 90 s.
    names = Step.objects.filter(run=after).order_by("name").values_list("name", flat=True)
    assert list(names) == ["s0", "s1"]


def test_r10_a_caught_timeout_still_commits_nothing(one_pass, worker_clock):
    def handler(p):
        try:
            worker_clock.now += 100
            p.check()
        except PassTimedOut:
            return p.advance("should not be committed")
        return p.done()

    options = {"timeout": timedelta(seconds=90), "retry": NO_JITTER}
    _report, after = one_pass("t.r10.caught", handler, **options)
    assert (after.failure_code, after.cursor) == ("timeout", None)


def test_handler_returning_something_else_is_a_failed_pass(define, drive):
    spec = define("t.bad.return", lambda p: {"done": True}, retry=NO_JITTER)
    run = start(spec).run
    drive(spec)
    assert "return p.advance(cursor), p.done() or None" in fresh(run).last_error


def test_r2_cursor_that_is_not_queue_safe_fails_the_pass_naming_the_path(define, drive):
    spec = define("t.r2.cursor", lambda p: p.advance({"page": (1, 2)}), retry=NO_JITTER)
    run = start(spec).run
    drive(spec)
    after = fresh(run)
    assert after.cursor is None
    assert "cursor.page" in after.last_error


def test_lease_left_counts_down_from_the_lease_by_the_workers_clock(define, drive, worker_clock):
    left = []

    def handler(p):
        worker_clock.now += 30
        left.append(p.lease_left())
        return p.done()

    spec = define("t.lease_left", handler, lease=timedelta(minutes=1))
    start(spec)
    drive(spec)
    assert left == [timedelta(seconds=30)]  # measured from just before the claim was sent


def test_signals_completed_and_failed_are_sent_after_commit(
    define, drive, django_capture_on_commit_callbacks
):
    from django_leasejobs.signals import run_completed, run_failed

    seen = []

    def completed(sender, run, **kwargs):
        seen.append(("completed", run.status))

    def failed(sender, run, failure_code, error, **kwargs):
        seen.append(("failed", run.status, failure_code, error))

    run_completed.connect(completed)
    run_failed.connect(failed)
    try:
        ok = define("t.sig.ok", lambda p: p.done())
        bad = define("t.sig.bad", lambda p: 1 / 0, retry=Retry(max_attempts=1))
        start(ok)
        start(bad)
        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            drive(ok, bad)
    finally:
        run_completed.disconnect(completed)
        run_failed.disconnect(failed)
    assert len(callbacks) == 2
    assert sorted(seen) == [
        ("completed", "done"),
        ("failed", "failed", "handler_failed", "ZeroDivisionError: division by zero"),
    ]


def test_a_raising_signal_receiver_never_stops_the_drive(
    define, drive, django_capture_on_commit_callbacks, caplog
):
    from django_leasejobs.signals import run_completed

    def broken(sender, run, **kwargs):
        raise RuntimeError("the metrics server is down")

    run_completed.connect(broken)
    try:
        spec = define("t.sig.broken", lambda p: p.done())
        for n in range(3):
            start(spec, instance=str(n))
        with django_capture_on_commit_callbacks(execute=True):
            report = drive(spec)
    finally:
        run_completed.disconnect(broken)
    assert report.completed == 3
    assert sum("raised RuntimeError" in r.getMessage() for r in caplog.records) == 3


# -- the verdict is the library's: a handler cannot talk its way out of it ---


@pytest.mark.parametrize("flag", ["lost", "timed_out", "step_failure", "recorded_steps", "verdict"])
def test_r5_a_handler_cannot_set_the_passs_old_flags_or_its_verdict(define, drive, flag):
    refused = []

    def handler(p):
        with contextlib.suppress(ZeroDivisionError, LeaseJobsError):  # swallows the failure...
            p.step("fails", lambda: 1 / 0, retry=Retry(max_attempts=1))
        try:
            setattr(p, flag, None)  # ... and tries to clear what the pass recorded
        except AttributeError:
            refused.append(flag)
        return p.done()

    spec = define("t.verdict", handler, retry=NO_JITTER)
    run = start(spec).run
    report = drive(spec)
    assert refused == [flag]
    assert report.completed == 0
    assert fresh(run).status == RunStatus.FAILED  # the step's policy: max_attempts=1
    assert fresh(run).failure_code == "step_exhausted"


def test_r10_a_handler_that_swallows_its_timeout_still_fails_as_timeout(
    define, drive, worker_clock
):
    def handler(p):
        worker_clock.now += 120
        with contextlib.suppress(PassTimedOut):  # swallowed: the verdict stands
            p.check()
        return p.done()

    spec = define("t.verdict.timeout", handler, timeout=timedelta(seconds=60), retry=NO_JITTER)
    run = start(spec).run
    assert drive(spec).retrying == 1
    assert fresh(run).failure_code == "timeout"
