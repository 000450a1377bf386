"""Queues (W4), priority (D7) and a run's result (SPEC §2, §3, §11; revision 2)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_leasejobs import InvalidJob, Retry, RunStatus, operators, start, start_many
from django_leasejobs.models import Run
from tests.utils import fresh

pytestmark = pytest.mark.django_db


def _recorder(define, name="t.order", **options):
    order: list[str] = []

    def handler(p):
        order.append(p.run.instance)
        return p.done()

    return define(name, handler, **options), order


# -- D7 priority ---------------------------------------------------------------------------------


def test_d7_a_higher_priority_is_driven_first_then_due_order(define, drive, frozen_clock):
    spec, order = _recorder(define)
    started = [("low", -5), ("zero-a", 0), ("high", 7), ("zero-b", 0), ("top", 100)]
    for instance, priority in started:
        start(spec, instance=instance, priority=priority)
        frozen_clock.advance(timedelta(seconds=1))  # each due a second after the one before
    # Due earlier than every other, but of the lowest priority: still last.
    start(spec, instance="oldest-lowest", priority=-100, run_after=frozen_clock.now())
    Run.objects.filter(instance="oldest-lowest").update(
        next_attempt_at=frozen_clock.now() - timedelta(hours=1)
    )
    report = drive(spec)
    assert report.completed == 6
    assert order == ["top", "high", "zero-a", "zero-b", "low", "oldest-lowest"]


def test_d7_a_run_of_higher_priority_not_yet_due_waits_its_time(define, drive, frozen_clock):
    spec, order = _recorder(define)
    start(spec, instance="later", priority=50, run_after=frozen_clock.now() + timedelta(hours=1))
    start(spec, instance="now", priority=-50)
    assert drive(spec).completed == 1
    assert order == ["now"]


def test_d7_the_due_read_is_read_in_index_order_without_a_sort(define):
    """The snapshot's ORDER BY is the due index's own order, so LIMIT stops the read."""
    from django_leasejobs import driver

    spec, _order = _recorder(define)
    start_many(spec, [(f"p{n}", None) for n in range(20)])
    queryset = driver.SNAPSHOT.queryset("default", (spec.name,), None, 500)
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
            plan = " / ".join(str(row[-1]) for row in cursor.fetchall())
            assert "USING INDEX leasejobs_run_due" in plan, plan
            assert "TEMP B-TREE" not in plan, plan  # no sort
        elif connection.vendor == "postgresql":
            # Tiny tables make a sequential scan cheaper; the question is whether
            # the index can serve the read in order, with no Sort node.
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("SET LOCAL enable_bitmapscan = off")
            cursor.execute(f"EXPLAIN {sql}", params)
            plan = " / ".join(row[0] for row in cursor.fetchall())
            assert "leasejobs_run_due" in plan, plan
            assert "Sort" not in plan, plan
        else:
            # As above: whether the index can serve the read in order.
            table = connection.ops.quote_name(Run._meta.db_table)
            forced = sql.replace(f"FROM {table}", f"FROM {table} FORCE INDEX (leasejobs_run_due)")
            assert forced != sql
            cursor.execute(f"EXPLAIN {forced}", params)
            rows = cursor.fetchall()
            columns = [c[0] for c in cursor.description]
            plan = [dict(zip(columns, row, strict=True)) for row in rows]
            run_table = [p for p in plan if p.get("table") == Run._meta.db_table]
            assert run_table, plan
            assert "filesort" not in str(run_table[0].get("Extra") or ""), plan


# -- queue and priority: defaults, overrides, joins, follow-ups ----------------------------------


def test_s2_queue_and_priority_come_from_the_job_unless_start_overrides_them(define):
    spec = define("t.routed", lambda p: p.done(), queue="imports", priority=5)
    default = start(spec, instance="a").run
    assert (default.queue, default.priority) == ("imports", 5)
    assert (fresh(default).queue, fresh(default).priority) == ("imports", 5)
    other = start(spec, instance="b", queue="urgent", priority=-3).run
    assert (fresh(other).queue, fresh(other).priority) == ("urgent", -3)
    plain = start("tests.noop", instance="plain").run
    assert (fresh(plain).queue, fresh(plain).priority) == ("default", 0)
    batch = start_many(spec, [("c", None), ("d", None)])
    assert {(fresh(r.run).queue, fresh(r.run).priority) for r in batch} == {("imports", 5)}


def test_r1_a_join_leaves_the_live_runs_queue_and_priority_alone(define):
    spec = define("t.joined", lambda p: p.done())
    first = start(spec, queue="slow", priority=1).run
    joined = start(spec, queue="fast", priority=9)
    assert joined.joined
    assert (fresh(first).queue, fresh(first).priority) == ("slow", 1)


def test_r1_a_kicks_follow_up_goes_where_the_kicked_run_went(define, drive):
    spec = define("t.kicked", lambda p: p.done())
    first = start(spec, {"n": 1}, queue="slow", priority=-2).run
    start(spec, {"n": 2}, again=True, queue="ignored", priority=50)
    assert drive(spec, queues=["slow"]).completed == 1
    follow_up = Run.objects.exclude(pk=first.pk).get(job=spec.name)
    assert (follow_up.origin, follow_up.queue, follow_up.priority) == ("follow_up", "slow", -2)


def test_a3_a_retried_run_keeps_its_queue_and_priority(define, drive):
    def handler(p):
        raise RuntimeError("no")

    spec = define("t.retried", handler, retry=Retry(max_attempts=1))
    failed = start(spec, queue="slow", priority=3).run
    drive(spec)
    assert fresh(failed).status == RunStatus.FAILED
    again = operators.retry(failed.pk).run
    assert (fresh(again).queue, fresh(again).priority) == ("slow", 3)


# -- §11: bad queue and priority ------------------------------------------------------------------


@pytest.mark.parametrize("priority", [101, -101, True, False, 1.0, "1", 10**20])
def test_s11_a_bad_priority_is_refused_naming_it_and_nothing_is_written(priority):
    with pytest.raises(ValueError, match="priority must be an int from -100 to 100"):
        start("tests.noop", instance="bad", priority=priority)
    assert not Run.objects.exists()


@pytest.mark.parametrize("queue", ["", "q" * 101, 3, b"q", "a\x00b", "\ud800"])
def test_s11_a_bad_queue_is_refused_naming_it_and_nothing_is_written(queue):
    with pytest.raises(ValueError, match="queue"):
        start("tests.noop", instance="bad", queue=queue)
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    ("option", "value"),
    [("queue", ""), ("queue", "q" * 101), ("queue", 7), ("priority", True), ("priority", 101)],
)
def test_s11_a_bad_queue_or_priority_is_refused_at_registration(define, option, value):
    with pytest.raises(InvalidJob, match=option):
        define("t.badroute", lambda p: p.done(), **{option: value})


def test_s11_the_database_refuses_a_priority_written_around_the_api():
    from django.db import IntegrityError, transaction

    run = start("tests.noop", instance="around").run
    with pytest.raises(IntegrityError), transaction.atomic():
        Run.objects.filter(pk=run.pk).update(priority=500)


# -- W4 queues -----------------------------------------------------------------------------------


def test_w4_a_drive_of_some_queues_steps_over_the_others(define, drive):
    spec, order = _recorder(define)
    for n in range(3):
        start(spec, instance=f"other-{n}", queue="other", priority=100)
    start(spec, instance="mail", queue="mail")
    start(spec, instance="default")
    report = drive(spec, queues=["mail", "default"], limit=2)
    assert report.completed == 2
    assert sorted(order) == ["default", "mail"]
    assert Run.objects.filter(queue="other", status=RunStatus.RUNNING).count() == 3
    order.clear()
    assert drive(spec).completed == 3  # every queue
    assert len(order) == 3


def test_w4_queue_names_compare_exactly_on_every_backend(define, drive):
    # MariaDB's default collation would make these one queue (SPEC §12).
    spec, order = _recorder(define)
    for queue in ["Mail", "mail ", "mäil"]:
        start(spec, instance=queue, queue=queue)
    assert drive(spec, queues=["mail"]).completed == 0
    assert drive(spec, queues=["Mail"]).completed == 1
    assert order == ["Mail"]


def test_w4_the_command_drives_the_queues_it_is_given(define, capsys):
    spec, order = _recorder(define)
    start(spec, instance="a", queue="a")
    start(spec, instance="b", queue="b")
    start(spec, instance="c", queue="c")
    call_command("rundueJobs", "--job", spec.name, "--queue", "a", "--queue", "c")
    assert "completed=2" in capsys.readouterr().out
    assert sorted(order) == ["a", "c"]


@pytest.mark.parametrize("queue", ["", "q" * 101])
def test_w4_a_bad_queue_option_is_refused(queue):
    with pytest.raises(CommandError, match="--queue"):
        call_command("rundueJobs", "--queue", queue)


@pytest.mark.parametrize(
    ("queues", "error"), [("mail", TypeError), ([], ValueError), ([""], ValueError)]
)
def test_w4_bad_queues_are_refused_before_the_drive(queues, error, drive):
    with pytest.raises(error):
        drive("tests.noop", queues=queues)


def test_s13_a_drive_of_some_queues_costs_what_any_drive_costs(define, drive):
    spec = define("t.budget", lambda p: p.done())
    start(spec, queue="a")
    drive(spec)  # the first drive of a process also looks after keys and schedules
    start(spec, queue="a")
    with CaptureQueriesContext(connection) as all_queues:
        assert drive(spec).completed == 1
    start(spec, queue="a")
    with CaptureQueriesContext(connection) as one_queue:
        assert drive(spec, queues=["a"]).completed == 1
    assert len(one_queue.captured_queries) == len(all_queues.captured_queries)


# -- p.done(result=...) ---------------------------------------------------------------------------


def test_r3_done_with_a_result_stores_it_as_json(one_pass):
    report, run = one_pass("t.result", lambda p: p.done(result={"rows": 3, "names": ["a", "ü"]}))
    assert report.completed == 1
    assert run.status == RunStatus.DONE
    assert run.decoded_result().value == {"rows": 3, "names": ["a", "ü"]}


def test_r3_done_without_a_result_stores_none(one_pass):
    _report, run = one_pass("t.noresult", lambda p: p.done())
    assert run.result is None
    assert run.decoded_result().value is None


def test_s11_a_result_that_is_not_queue_safe_fails_the_pass_naming_its_path(one_pass):
    report, run = one_pass("t.badresult", lambda p: p.done(result={"x": [1, 2, 3, {1, 2}]}))
    assert report.completed == 0
    assert run.status != RunStatus.DONE
    assert run.result is None
    assert "result.x.3" in run.last_error


def test_r3_a_result_reaches_the_completed_signal(
    define, drive, django_capture_on_commit_callbacks
):
    from django_leasejobs import signals

    seen = []

    def receiver(sender, run, **kwargs):
        seen.append(run.decoded_result().value)

    signals.run_completed.connect(receiver)
    try:
        spec = define("t.signalled", lambda p: p.done(result=[1, "two"]))
        start(spec)
        with django_capture_on_commit_callbacks(execute=True):
            drive(spec)
    finally:
        signals.run_completed.disconnect(receiver)
    assert seen == [[1, "two"]]
