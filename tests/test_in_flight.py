"""A8: a job not safe to repeat records each step as begun before it runs it.

So a run held after its pass stopped mid-way names the step that may have
half-happened -- and one that stopped before any step says so. Every other
job's step costs the one write it always did (§13).
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_leasejobs import RunStatus, run_due_jobs, start
from django_leasejobs.in_flight import NOTHING, InFlight, in_flight, in_flight_of
from django_leasejobs.models import Run, Step
from tests.models import Effect
from tests.processes import python
from tests.test_driver import DRIVE, drop_ledger, one_pass, one_step, statements
from tests.utils import wait_for

pytestmark = pytest.mark.django_db


def _ledger_while_running(define, drive, *, safe_to_repeat):
    """The ledger's rows as each step's function saw them, and the ledger at the end."""
    seen = []

    def handler(p):
        for name in ("reserve", "charge:100"):
            p.step(name, lambda name=name: seen.append((name, _in_flight(p), _row(p, name))))
        return p.advance(1)

    spec = define("t.a8.ledger", handler, safe_to_repeat=safe_to_repeat)
    run = start(spec).run
    report = drive(spec)
    assert report.advanced == 1, report.as_dict()
    return run, seen


def _in_flight(p):
    return in_flight_of([p.run.id])[p.run.id], _row(p, "reserve")


def _row(p, name):
    step = Step.objects.filter(run_id=p.run.id, name=name).first()
    return None if step is None else (step.result, step.began_at is not None)


def test_a8_a_step_of_a_job_not_safe_to_repeat_is_recorded_as_begun_before_it_runs(define, drive):
    _, seen = _ledger_while_running(define, drive, safe_to_repeat=False)
    (first, (during_first, _), row_first), (second, (during_second, reserve), row_second) = seen
    assert (first, during_first.step, row_first) == ("reserve", "reserve", (None, True))
    assert during_first.began_at is not None
    assert (second, during_second.step, row_second) == ("charge:100", "charge:100", (None, True))
    # While the second runs, the first is complete and no longer marked.
    assert reserve == ("null", False)


def test_a8_a_job_safe_to_repeat_writes_nothing_before_a_step(define, drive):
    _, seen = _ledger_while_running(define, drive, safe_to_repeat=True)
    assert [(name, during, row) for name, (during, _), row in seen] == [
        ("reserve", NOTHING, None),
        ("charge:100", InFlight(last_completed="reserve"), None),
    ]


def test_a8_a_failed_attempt_clears_the_mark_and_keeps_its_error(define, drive):
    def handler(p):
        p.step("reserve", lambda: 1)
        p.step("charge:100", lambda: 1 / 0)

    spec = define("t.a8.failed", handler, safe_to_repeat=False)
    run = start(spec).run
    assert drive(spec).retrying == 1
    failed = Step.objects.get(run=run, name="charge:100")
    assert (failed.result, failed.attempts, failed.began_at) == (None, 1, None)
    assert "ZeroDivisionError" in failed.last_error
    assert in_flight(run) == InFlight(last_completed="reserve")


def test_a8_in_flight_of_reads_many_runs_at_once(define, drive):
    spec = define("t.a8.many", lambda p: p.advance(1), safe_to_repeat=False)
    plain, marked = start(spec, instance="a").run, start(spec, instance="b").run
    Step.objects.create(run=marked, name="charge:1", recorded_at=marked.started_at)
    Step.objects.filter(run=marked).update(began_at=marked.started_at)
    with CaptureQueriesContext(connection) as queries:
        found = in_flight_of([plain.pk, marked.pk])
    assert len(queries) == 1
    assert found == {plain.pk: NOTHING, marked.pk: InFlight("charge:1", marked.started_at)}


# -- §13: the second write is for those jobs only --------------------------------------------


@pytest.fixture
def warm(drive):
    drive()


@pytest.mark.parametrize(("safe_to_repeat", "writes"), [(True, 1), (False, 2)])
def test_s13_a8_a_step_costs_a_job_not_safe_to_repeat_two_writes_and_any_other_one(
    define, drive, warm, safe_to_repeat, writes
):
    steps = 3

    def handler(p):
        for n in range(steps):
            p.step(f"s{n}", lambda n=n: n)
        return p.advance(1)

    spec = define(f"t.a8.budget.{safe_to_repeat}", handler, safe_to_repeat=safe_to_repeat)
    start(spec)
    with CaptureQueriesContext(connection) as queries:
        drive(spec)
    # as test_driver's budget: + each step's writes, and the drop of the ledger at commit
    expected = DRIVE + one_pass() + steps * writes * one_step() + drop_ledger()
    assert len(statements(queries)) == expected, statements(queries)


# -- with a real crash ---------------------------------------------------------------------

JOB = "tests.unrepeatable"


def _killed_when(run, condition, what):
    worker = python(f"from django_leasejobs import run_due_jobs; run_due_jobs(jobs=[{JOB!r}])")
    try:
        wait_for(condition, what, worker=worker)
    finally:
        worker.kill()  # SIGKILL: no cleanup, no outcome written
        worker.communicate(timeout=60)
    # The killer's pid is gone, so this host's next drive takes over at once (L9).
    assert run_due_jobs(jobs=[JOB]).held == 1
    held = Run.objects.get(pk=run.pk)
    assert (held.status, held.failure_code) == (RunStatus.HELD, "interrupted")
    return held


@pytest.mark.django_db(transaction=True)
@pytest.mark.concurrency
def test_a8_l3_a_run_held_after_a_kill_inside_its_second_step_names_that_step():
    run = start(JOB).run
    held = _killed_when(
        run,
        lambda: Step.objects.filter(run=run, name="two", began_at__isnull=False).exists(),
        "step two to begin",
    )
    found = in_flight(held)
    assert found.step == "two"
    assert found.began_at is not None
    assert Effect.objects.filter(run_id=run.pk, name="one").count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.concurrency
def test_a8_l3_a_run_held_after_a_kill_before_its_first_step_says_none_had_begun():
    run = start(JOB, {"hang": "before_first_step"}).run
    held = _killed_when(
        run,
        lambda: Effect.objects.filter(run_id=run.pk, name="invoked@1").exists(),
        "the handler to be invoked",
    )
    assert in_flight(held) == NOTHING
