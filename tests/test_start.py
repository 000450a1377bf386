"""start(): R1 coalescing and R2 at the door."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_leasejobs import JobNotRegistered, NotQueueSafe, RunStatus, start
from django_leasejobs.models import Run
from django_leasejobs.registry import get_job
from tests.factories import RunFactory
from tests.utils import statements

pytestmark = pytest.mark.django_db


def test_r1_start_creates_a_running_run_due_now():
    result = start("tests.walk", {"source": "crm"}, instance="acme")
    run = result.run
    assert result.joined is False
    assert run.status == RunStatus.RUNNING
    assert run.job == "tests.walk"
    assert run.instance == "acme"
    assert json.loads(run.payload) == {"source": "crm"}
    assert run.cursor is None
    assert run.counters == "{}"
    assert run.attempts == 0
    assert run.started_at is not None
    assert run.next_attempt_at == run.started_at
    assert run.live_key == "tests.walk|acme"
    assert Run.objects.count() == 1


def test_r1_second_start_joins_the_live_run_unchanged():
    first = start("tests.walk", {"v": 1}).run
    Run.objects.filter(pk=first.pk).update(cursor='{"page": 7}', counters='{"seen": 70}')
    second = start("tests.walk", {"v": 2})
    assert second.joined is True
    assert second.run.pk == first.pk
    assert second.run.payload == '{"v":1}'
    assert second.run.cursor == '{"page": 7}'
    assert second.run.counters == '{"seen": 70}'
    assert second.run.started_at == first.started_at
    assert second.run.rerun_requested is False
    assert Run.objects.count() == 1


def test_r1_instances_do_not_coalesce_with_each_other():
    a = start("tests.walk", instance="a")
    b = start("tests.walk", instance="b")
    assert not a.joined
    assert not b.joined
    assert a.run.pk != b.run.pk


def test_r1_a_held_run_is_live_and_is_joined():
    held = RunFactory(job="tests.walk", instance="x", status=RunStatus.HELD)
    result = start("tests.walk", instance="x")
    assert result.joined
    assert result.run.pk == held.pk


@pytest.mark.parametrize("status", [RunStatus.DONE, RunStatus.FAILED, RunStatus.CANCELLED])
def test_r1_a_finished_run_does_not_block_a_new_start(status):
    old = RunFactory(job="tests.walk", instance="x", status=status)
    assert old.live_key is None
    result = start("tests.walk", instance="x")
    assert result.joined is False
    assert result.run.pk != old.pk
    assert Run.objects.filter(job="tests.walk", instance="x").count() == 2


def test_r1_again_sets_the_follow_up_flag_and_latest_payload_once():
    live = start("tests.walk", {"v": 0}).run
    for version in range(1, 6):
        joined = start("tests.walk", {"v": version}, again=True)
        assert joined.joined
        assert joined.run.pk == live.pk
    live.refresh_from_db()
    assert live.rerun_requested is True
    assert json.loads(live.rerun_payload) == {"v": 5}
    assert json.loads(live.payload) == {"v": 0}  # the live run's own payload is untouched
    assert Run.objects.count() == 1


def test_r1_again_on_a_fresh_start_requests_nothing():
    result = start("tests.walk", {"v": 0}, again=True)
    assert not result.joined
    assert result.run.rerun_requested is False


def test_start_accepts_the_job_object():
    result = start(get_job("tests.walk"))
    assert result.run.job == "tests.walk"
    assert get_job("tests.walk").start(instance="other").run.instance == "other"


def test_r2_unsafe_payload_is_refused_and_nothing_written():
    with pytest.raises(NotQueueSafe) as caught:
        start("tests.walk", {"items": [1, 2, 3, {"when": {1, 2}}]})
    assert caught.value.path == "payload.items.3.when"
    assert Run.objects.count() == 0


def test_unknown_job_lists_registered_jobs_and_writes_nothing():
    with pytest.raises(JobNotRegistered) as caught:
        start("tests.nope")
    message = str(caught.value)
    assert "'tests.nope'" in message
    assert "tests.walk" in message
    assert "tests.noop" in message
    assert Run.objects.count() == 0


@pytest.mark.parametrize("instance", ["", "x" * 201, None, 3])
def test_bad_instance_is_refused(instance):
    with pytest.raises(ValueError, match="instance"):
        start("tests.walk", instance=instance)
    assert Run.objects.count() == 0


def test_s13_start_costs_one_statement_and_a_kicked_join_three():
    from django_leasejobs.store.sql import returns_rows

    with CaptureQueriesContext(connection) as fresh:
        start("tests.walk", instance="q")
    # INSERT ... RETURNING (with its NOTIFY on PostgreSQL); MariaDB reads the row back.
    assert len(statements(fresh)) == (1 if returns_rows("default") else 2), fresh.captured_queries
    with CaptureQueriesContext(connection) as joined:
        start("tests.walk", instance="q", again=True)
    # INSERT (the key is taken), SELECT the live run, UPDATE its kick by primary key
    assert len(statements(joined)) == 3, joined.captured_queries


def test_s2_every_run_says_how_it_began(define, frozen_clock):
    from datetime import UTC, datetime, timedelta

    from django_leasejobs import cancel, retry, run_due_jobs, run_now

    spec = define("t.origin", lambda p: p.done(), schedule="0 * * * *", timezone="UTC")
    frozen_clock.set(datetime(2026, 3, 1, 12, tzinfo=UTC))
    run_due_jobs(jobs=[spec.name])
    api = start(spec, instance="api").run
    frozen_clock.advance(timedelta(hours=1, minutes=1))
    run_due_jobs(jobs=[spec.name])  # fires 13:00, and drives api's run and the scheduled one
    scheduled = Run.objects.get(job=spec.name, instance="default")
    hand = run_now(spec.name, "alice").run
    assert cancel(hand.pk)
    retried = retry(hand.pk).run
    kicked = start(spec, {"v": 1}, instance="kick").run
    start(spec, {"v": 2}, instance="kick", again=True)
    run_due_jobs(jobs=[spec.name])
    follow_up = Run.objects.filter(instance="kick").exclude(pk=kicked.pk).get()
    origins = {
        name: Run.objects.get(pk=run.pk).origin
        for name, run in [
            ("api", api),
            ("schedule", scheduled),
            ("hand", hand),
            ("retry", retried),
            ("follow_up", follow_up),
        ]
    }
    assert origins == {name: name for name in origins}


@pytest.mark.parametrize("deferred", [False, True], ids=["due now", "run_after"])
@pytest.mark.parametrize("batch", [False, True], ids=["start", "start_many"])
def test_r1_a_new_run_is_returned_as_stored_column_for_column(deferred, batch):
    """The insert reads back only the id and the start time; the rest must still be the row's."""
    from datetime import timedelta

    from django.utils import timezone

    from django_leasejobs import start_many

    run_after = timezone.now() + timedelta(hours=2) if deferred else None
    if batch:
        results = start_many("tests.walk", [("b1", {"n": 1}), ("b2", [2])], run_after=run_after)
    else:
        results = [start("tests.walk", {"n": 1}, instance="b1", run_after=run_after)]
    assert results
    for result in results:
        returned = result.run
        stored = Run.objects.get(pk=returned.pk)
        for field in Run._meta.concrete_fields:
            name = field.attname
            assert getattr(returned, name) == getattr(stored, name), name
        assert returned._state.adding is False
        assert returned._state.db == stored._state.db
        assert returned.next_attempt_at == (run_after or stored.started_at)
