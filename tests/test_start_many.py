"""start_many(): each item as start() would (R1, R2), for a constant number of statements (§3)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_leasejobs import (
    InvalidKey,
    JobNotRegistered,
    NotQueueSafe,
    RunStatus,
    cancel,
    start,
    start_many,
    store,
)
from django_leasejobs.models import Run
from django_leasejobs.states import RunOrigin
from tests.factories import RunFactory
from tests.utils import fresh, statements

pytestmark = pytest.mark.django_db

LEASE = timedelta(seconds=30)
FIELDS = [field.attname for field in Run._meta.concrete_fields]


def test_r1_start_many_starts_each_item_as_start_would():
    results = start_many("tests.walk", [("a", {"n": 1}), ("b", {"n": 2})])
    assert [result.joined for result in results] == [False, False]
    assert [result.run.instance for result in results] == ["a", "b"]
    for result, n in zip(results, (1, 2), strict=True):
        run = result.run
        assert json.loads(run.payload) == {"n": n}
        assert run.status == RunStatus.RUNNING
        assert run.origin == RunOrigin.API
        assert run.attempts == 0
        assert run.next_attempt_at == run.started_at
        assert run.live_key == f"tests.walk|{run.instance}"
        # What start_many hands back is the row as stored, column for column.
        stored = fresh(run)
        assert [getattr(run, f) for f in FIELDS] == [getattr(stored, f) for f in FIELDS]
    assert Run.objects.count() == 2


def test_r1_start_many_joins_live_runs_unchanged_and_keeps_the_items_order():
    live = start("tests.walk", {"v": "first"}, instance="b").run
    Run.objects.filter(pk=live.pk).update(cursor='{"page": 3}')
    results = start_many("tests.walk", [("a", 1), ("b", 2), ("c", 3)])
    assert [(r.run.instance, r.joined) for r in results] == [
        ("a", False),
        ("b", True),
        ("c", False),
    ]
    joined = results[1].run
    assert joined.pk == live.pk
    assert joined.payload == '{"v":"first"}'
    assert joined.cursor == '{"page": 3}'
    assert joined.rerun_requested is False  # start_many never kicks
    assert fresh(live).payload == '{"v":"first"}'
    assert Run.objects.count() == 3


def test_r1_start_many_joins_a_held_run_and_passes_a_finished_one():
    held = RunFactory(job="tests.walk", instance="held", status=RunStatus.HELD)
    RunFactory(job="tests.walk", instance="done", status=RunStatus.DONE, live_key=None)
    results = start_many("tests.walk", [("held", None), ("done", None)])
    assert results[0].joined
    assert results[0].run.pk == held.pk
    assert not results[1].joined
    assert Run.objects.filter(instance="done").count() == 2


def test_r1_start_many_repeated_instance_joins_the_run_its_first_item_started():
    results = start_many("tests.walk", [("x", "first"), ("y", 0), ("x", "second")])
    assert results[0].joined is False
    assert results[2].joined is True
    assert results[2].run.pk == results[0].run.pk
    assert fresh(results[0].run).payload == '"first"'
    assert Run.objects.count() == 2


def test_r1_start_many_follows_a_run_cancelled_mid_pass_as_start_would(frozen_clock):
    # A cancel while its pass is in flight keeps the key (§3 cancel): a start joins it as a kick.
    run = start("tests.walk", instance="c").run
    assert store.claim(run.pk, "owner-1", LEASE, "host:1:1:x", takeover=False)
    assert store.begin(run.pk, "owner-1", LEASE / 4)
    assert cancel(run.pk)
    (result,) = start_many("tests.walk", [("c", {"later": True})])
    assert result.joined
    assert result.run.pk == run.pk
    stored = fresh(run)
    assert stored.status == RunStatus.CANCELLED
    assert stored.rerun_requested is True
    assert stored.rerun_payload == '{"later":true}'


def test_r2_start_many_a_bad_payload_writes_nothing_and_names_its_index():
    items = [("a", 1), ("b", 2), ("c", {"when": {1, 2}})]
    with pytest.raises(NotQueueSafe) as caught:
        start_many("tests.walk", items)
    assert "items.2.payload.when" in str(caught.value)
    assert Run.objects.count() == 0


def test_start_many_a_bad_instance_writes_nothing_and_names_its_index():
    with pytest.raises(InvalidKey) as caught:
        start_many("tests.walk", [("a", 1), ("", 2)])
    assert "items.1.instance" in str(caught.value)
    with pytest.raises(TypeError, match=r"items\.1 must be an \(instance, payload\) pair"):
        start_many("tests.walk", [("a", 1), "b"])
    assert Run.objects.count() == 0


def test_start_many_an_unknown_job_or_bad_run_after_writes_nothing():
    with pytest.raises(JobNotRegistered):
        start_many("tests.nope", [("a", 1)])
    with pytest.raises(ValueError, match="aware datetime"):
        start_many("tests.walk", [("a", 1)], run_after=timezone.now().replace(tzinfo=None))
    assert Run.objects.count() == 0


def test_start_many_with_no_items_writes_nothing():
    with CaptureQueriesContext(connection) as queries:
        assert start_many("tests.walk", []) == []
    assert statements(queries) == []


def test_start_many_run_after_makes_the_new_runs_due_then_and_not_before():
    later = timezone.now() + timedelta(hours=2)
    start("tests.walk", instance="live")
    results = start_many("tests.walk", [("new", 1), ("live", 2)], run_after=later)
    assert fresh(results[0].run).next_attempt_at == later
    assert results[0].run.next_attempt_at == later
    assert results[1].joined  # a join ignores run_after, as start()'s does
    assert fresh(results[1].run).next_attempt_at < later


def _cost(items: list[tuple[str, object]]) -> int:
    with CaptureQueriesContext(connection) as queries:
        start_many("tests.walk", items)
    return len(statements(queries))


def test_s13_start_many_costs_the_same_statements_for_three_items_or_three_hundred():
    small = _cost([(f"s{n}", n) for n in range(3)])
    large = _cost([(f"l{n}", n) for n in range(300)])
    assert small == large
    # One INSERT that returns what went in; MariaDB reads them back.
    assert small == (1 if connection.vendor != "mysql" else 2)
    assert Run.objects.count() == 303


def test_s13_start_many_joining_costs_one_read_whatever_the_number_taken():
    for n in range(200):
        start("tests.walk", instance=f"t{n}")
    few = _cost([("t0", 0), ("t1", 1), ("f0", 0)])
    many = _cost([(f"t{n}", n) for n in range(200)] + [(f"g{n}", n) for n in range(100)])
    assert few == many
    assert few == (1 if connection.vendor != "mysql" else 2) + 1  # + the live runs' read


def test_start_many_inside_a_rolled_back_transaction_leaves_nothing():
    with transaction.atomic():
        start_many("tests.walk", [("a", 1), ("b", 2)])
        assert Run.objects.count() == 2
        transaction.set_rollback(True)  # the caller changes its mind
    assert Run.objects.count() == 0
