"""Nothing one value or one row does can stop the drive (SPEC R9, §11, §12).

Each test drives a run whose handler produces -- or whose row holds --
something a database cannot store or hand back, and asserts two things: the
run settles as an ordinary failed (or committed) pass with a clean error, and
the run beside it is still driven.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta

import pytest
from django.db import DataError, connection, transaction

from django_leasejobs import Defer, Retry, RunStatus, start, store
from django_leasejobs.codec import MAX_DEPTH
from django_leasejobs.models import Run, Step
from tests.utils import fresh

pytestmark = pytest.mark.django_db

ONCE = Retry(max_attempts=1)


def deep(levels):
    value: list = []
    for _ in range(levels):
        value = [value]
    return value


@pytest.fixture
def beside(define):
    """A second, well-behaved job, started after the bad one: it must still complete."""
    spec = define("t.beside", lambda p: p.done())

    def make():
        return start(spec).run

    return make


def drive_both(drive, spec):
    return drive(spec, "t.beside")


# -- outcome values a backend cannot store (§11, §12) ------------------------------


def test_r2_a_lone_surrogate_in_a_cursor_or_counter_name_commits_and_reads_back(
    define, drive, beside
):
    name = "report-\udcff.csv"  # an f-string over a file name that is not UTF-8

    def handler(p):
        p.count(name)
        return p.advance({"file": name})

    spec = define("t.surrogate", handler)
    run = start(spec).run
    other = beside()
    report = drive_both(drive, spec)
    assert report.advanced == 1
    assert report.completed == 1
    committed = fresh(run)
    assert committed.decoded_cursor().value == {"file": name}
    assert committed.decoded_counters().value == {name: 1}
    assert fresh(other).status == RunStatus.DONE


def test_r4_a_lone_surrogate_or_nul_in_an_error_is_stored_escaped(define, drive, beside):
    def handler(p):
        raise OSError("cannot open report-\udcff.csv\x00 (NUL)")

    spec = define("t.surrogate.error", handler, retry=ONCE)
    run = start(spec).run
    other = beside()
    report = drive_both(drive, spec)
    assert report.failed == 1
    failed = fresh(run)
    assert failed.status == RunStatus.FAILED
    assert failed.last_error == "OSError: cannot open report-\\udcff.csv\\x00 (NUL)"
    assert fresh(other).status == RunStatus.DONE


@pytest.mark.parametrize(
    ("cursor", "path", "what"),
    [
        pytest.param(deep(2000), "cursor" + ".0" * MAX_DEPTH, "nested more than", id="deep"),
        pytest.param({"n": 10**5000}, "cursor.n", "more than 4300 digits", id="long-int"),
        pytest.param("x" * (20 * 1024 * 1024), "cursor", "bytes of JSON", id="20-MB"),
    ],
)
def test_r2_a_cursor_no_backend_can_store_fails_the_pass_naming_the_path(
    define, drive, beside, cursor, path, what
):
    spec = define("t.unstorable", lambda p: p.advance(cursor), retry=ONCE)
    run = start(spec).run
    other = beside()
    report = drive_both(drive, spec)
    assert report.failed == 1
    failed = fresh(run)
    assert failed.failure_code == "handler_failed"
    assert failed.last_error.startswith("NotQueueSafe: ")
    assert what in failed.last_error
    assert path[:60] in failed.last_error
    assert failed.cursor is None  # nothing the handler produced was written (R4)
    assert fresh(other).status == RunStatus.DONE  # the connection survived (MariaDB: 1153)


def test_r2_a_payload_no_backend_can_store_is_refused_with_its_path_and_nothing_written():
    from django_leasejobs import NotQueueSafe

    for payload, path in [
        (deep(2000), "payload" + ".0" * MAX_DEPTH),
        ({"n": [1, 10**5000]}, "payload.n.1"),
    ]:
        with pytest.raises(NotQueueSafe) as caught:
            start("tests.noop", payload)
        assert caught.value.path == path
    assert not Run.objects.exists()


def test_r2_a_payload_with_a_lone_surrogate_is_stored_and_comes_back_unchanged():
    payload = {"file": "\ud800-\udfff"}
    run = start("tests.noop", payload).run
    assert fresh(run).decoded_payload().value == payload


def test_r5_total_past_a_64_bit_column_fails_the_pass_with_a_clear_error(define, drive, beside):
    def handler(p):
        p.total(2**63)
        return p.done()

    spec = define("t.total.big", handler, retry=ONCE)
    run = start(spec).run
    other = beside()
    assert drive_both(drive, spec).failed == 1
    assert "total() takes an int from 0 to 2**63 - 1" in fresh(run).last_error
    assert fresh(other).status == RunStatus.DONE


def test_r8_a_defer_past_the_documented_maximum_fails_the_pass(define, drive, beside):
    def handler(p):
        raise Defer(timedelta.max)

    spec = define("t.defer.max", handler, retry=ONCE)
    run = start(spec).run
    other = beside()
    assert drive_both(drive, spec).failed == 1
    failed = fresh(run)
    assert "Defer(delay) takes at most 3653 days" in failed.last_error
    assert failed.next_attempt_at is None
    assert fresh(other).status == RunStatus.DONE


def test_r4_sys_exit_in_a_handler_is_an_ordinary_failed_pass(define, drive, beside):
    def handler(p):
        sys.exit(3)

    spec = define("t.exit", handler, retry=ONCE)
    run = start(spec).run
    other = beside()
    report = drive_both(drive, spec)
    assert report.failed == 1
    assert fresh(run).last_error == "SystemExit: 3"
    assert fresh(other).status == RunStatus.DONE


def test_r4_an_outcome_write_the_database_refuses_settles_the_pass_cleanly(
    define, drive, beside, monkeypatch
):
    spec = define("t.refused", lambda p: p.done(), retry=ONCE)
    run = start(spec).run
    other = beside()
    commit = store.commit

    def refusing(written):
        if written.run.pk == run.pk:
            with transaction.atomic():  # a real failed statement, as the database would
                raise DataError("value too long for type character varying(26)")
        return commit(written)

    monkeypatch.setattr(store, "commit", refusing)
    report = drive_both(drive, spec)
    assert report.failed == 1
    failed = fresh(run)
    assert failed.status == RunStatus.FAILED  # settled, never left begun
    assert failed.lease_owner is None
    assert failed.last_error == (
        "the pass's outcome could not be stored: "
        "DataError: value too long for type character varying(26)"
    )
    assert fresh(other).status == RunStatus.DONE


# -- rows a backend cannot hand back (R9, §12) -----------------------------------------


def corrupt(run, how):
    """Make *run*'s row one the database stores but cannot hand back."""
    if connection.vendor == "sqlite":
        sql = {
            "utf-8": "UPDATE leasejobs_run SET payload = CAST(X'22C3A922FF' AS TEXT) WHERE id = %s",
            "date": "UPDATE leasejobs_run SET started_at = '2026-02-30 10:00:00' WHERE id = %s",
        }[how]
    elif connection.vendor == "postgresql":
        sql = (
            "UPDATE leasejobs_run SET started_at = started_at + interval '8000 years' WHERE id = %s"
        )
    else:  # MariaDB stores only what it can return: the classic malformed row (R9)
        sql = "UPDATE leasejobs_run SET payload = '{broken' WHERE id = %s"
    with connection.cursor() as cursor:
        cursor.execute(sql, [run.pk])


@pytest.mark.parametrize("how", ["utf-8", "date"])
def test_r9_a_row_the_database_cannot_hand_back_fails_alone_and_is_charged(
    define, drive, beside, how
):
    spec = define(
        "t.unreadable", lambda p: p.done(), retry=Retry(max_attempts=2, base=timedelta(0))
    )
    run = start(spec).run
    other = beside()
    corrupt(run, how)
    first = drive_both(drive, spec)
    assert first.retrying == 1
    assert first.completed == 1
    assert fresh(other).status == RunStatus.DONE
    second = drive(spec)
    assert second.failed == 1
    codes = Run.objects.filter(pk=run.pk).values_list("status", "failure_code", "attempts")
    assert list(codes) == [("failed", "decode_failed", 2)]
    error = Run.objects.filter(pk=run.pk).values_list("last_error", flat=True).get()
    assert error.startswith(("UnreadableRow: ", "DecodeFailed: "))
    assert "\ufffd" not in error  # the row's text is never quoted
    assert "\xe9" not in error


def test_r9_deep_or_infinite_json_in_a_row_fails_as_decode_failed(define, drive):
    spec = define("t.deep.row", lambda p: p.done(), retry=ONCE)
    deep_run = start(spec, instance="deep").run
    huge_run = start(spec, instance="huge").run
    Run.objects.filter(pk=deep_run.pk).update(payload="[" * 5000 + "]" * 5000)
    Run.objects.filter(pk=huge_run.pk).update(payload='{"x": 1e999}')
    assert drive(spec).failed == 2
    for run in (deep_run, huge_run):
        assert fresh(run).failure_code == "decode_failed"


# -- steps (R5) ---------------------------------------------------------------------------


def test_r5_a_step_inside_the_handlers_own_transaction_is_refused(define, drive):
    calls = []

    def handler(p):
        with transaction.atomic():
            p.step("save", lambda: calls.append("ran"))
        return p.done()

    spec = define("t.step.atomic", handler, retry=ONCE)
    run = start(spec).run
    assert drive(spec).failed == 1
    failed = fresh(run)
    assert failed.last_error.startswith("StepInTransaction: step 'save' was called inside")
    assert calls == []
    assert not Step.objects.filter(run=run).exists()


def test_r5_the_documented_pattern_opens_the_transaction_inside_the_step(define, drive):
    saved = []

    def save():
        with transaction.atomic():
            saved.append(1)

    spec = define("t.step.pattern", lambda p: p.step("save", save) or p.done())
    run = start(spec).run
    assert drive(spec).completed == 1
    assert saved == [1]
    assert fresh(run).status == RunStatus.DONE


def test_r5_counters_are_read_only_to_the_handler(define, drive):
    def handler(p):
        p.count("n")
        p.counters["n"] = "oops"
        return p.done()

    spec = define("t.counters.ro", handler, retry=ONCE)
    run = start(spec).run
    assert drive(spec).failed == 1
    failed = fresh(run)
    assert failed.failure_code == "handler_failed"
    assert "TypeError" in failed.last_error
    assert json.loads(failed.counters) == {}


def test_r5_a_result_that_cannot_be_encoded_records_an_attempt_so_its_retry_applies(
    define, drive, frozen_clock
):
    calls = []

    def handler(p):
        p.step(
            "deep",
            lambda: calls.append(1) or deep(5000),
            retry=Retry(max_attempts=2, base=timedelta(0), jitter=0),
        )
        return p.done()

    spec = define("t.step.deep", handler, retry=Retry(max_attempts=5, base=timedelta(0)))
    run = start(spec).run
    drive(spec)
    step = Step.objects.get(run=run, name="deep")
    assert step.attempts == 1
    assert "nested too deeply" in step.last_error
    drive(spec)
    assert fresh(run).status == RunStatus.FAILED
    assert fresh(run).failure_code == "step_exhausted"
    assert calls == [1, 1]


def test_r5_a_retry_that_is_not_a_policy_is_refused_clearly(define, drive):
    spec = define("t.step.retry", lambda p: p.step("s", lambda: 1, retry="3"), retry=ONCE)
    run = start(spec).run
    drive(spec)
    assert "retry must be a django_leasejobs.Retry, got '3'" in fresh(run).last_error


@pytest.mark.parametrize("name", ["a\x00b", "\udcff"])
def test_r5_a_step_name_no_backend_can_store_is_refused(define, drive, name):
    spec = define("t.step.name", lambda p: p.step(name, lambda: 1), retry=ONCE)
    run = start(spec).run
    drive(spec)
    assert "holds a NUL or a lone surrogate" in fresh(run).last_error
