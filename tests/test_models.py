"""The models: tolerant decoding of malformed rows (A2, R9), keys and indexes (§2), and a
run's lease state on the database's clock (L1, A8)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from django_leasejobs.admin.display import lease_text
from django_leasejobs.clock import get_clock
from django_leasejobs.models import Run, Step
from django_leasejobs.states import FAILURE_MEANINGS, FailureCode, LeaseState, RunStatus, Throttle
from tests.factories import RunFactory, StepFactory
from tests.utils import as_json

pytestmark = pytest.mark.django_db


def test_malformed_json_row_loads_and_reports_which_field_and_why():
    run = RunFactory(payload='{"source": "crm"', cursor="[1, 2,", counters="{}")
    loaded = Run.objects.get(pk=run.pk)  # loading never decodes, so never fails
    errors = loaded.decode_errors
    assert set(errors) == {"payload", "cursor"}
    assert "JSONDecodeError" in errors["payload"]
    assert "JSONDecodeError" in errors["cursor"]
    cursor = loaded.decoded_cursor()
    assert not cursor.ok
    assert cursor.raw == "[1, 2,"
    assert loaded.decoded_counters().value == {}


def test_malformed_counters_are_reported_too():
    run = RunFactory(counters="not json")
    assert set(Run.objects.get(pk=run.pk).decode_errors) == {"counters"}


def test_null_cursor_means_no_pass_committed_not_an_error():
    run = RunFactory(cursor=None)
    assert run.decode_errors == {}
    assert run.decoded_cursor().value is None
    assert run.decoded_cursor().ok


def test_run_str_and_liveness():
    run = RunFactory(job="tests.walk", instance="acme")
    assert str(run) == f"tests.walk[acme] {run.pk} (running)"
    assert run.is_live
    assert not RunFactory(status=RunStatus.DONE).is_live


def test_run_ids_are_26_char_time_ordered_strings():
    runs = [RunFactory() for _ in range(3)]
    assert all(len(run.pk) == 26 for run in runs)
    assert list(Run.objects.order_by("id").values_list("pk", flat=True)) == [r.pk for r in runs]


def test_r1_live_key_is_unique_in_the_database():
    RunFactory(job="tests.walk", instance="x")
    with pytest.raises(IntegrityError), transaction.atomic():
        RunFactory(job="tests.walk", instance="x")


def test_finished_runs_release_the_key():
    RunFactory(job="tests.walk", instance="x", status=RunStatus.DONE)
    RunFactory(job="tests.walk", instance="x", status=RunStatus.FAILED)
    RunFactory(job="tests.walk", instance="x")
    assert Run.objects.live().count() == 1
    assert Run.objects.finished().count() == 2


def test_step_name_is_unique_per_run_and_cascades():
    step = StepFactory(name="fetch:1")
    with pytest.raises(IntegrityError), transaction.atomic():
        StepFactory(run=step.run, name="fetch:1")
    assert str(step) == "fetch:1 (done)"
    assert not StepFactory(result=None).completed
    step.run.delete()
    assert not Step.objects.filter(pk=step.pk).exists()


def test_d7_due_index_leads_with_status_then_priority_descending_then_due_time_then_id():
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, Run._meta.db_table)
    due = constraints["leasejobs_run_due"]
    assert due["columns"] == ["status", "priority", "next_attempt_at", "id"]
    if due.get("orders"):  # introspected where the backend reports it
        assert due["orders"] == ["ASC", "DESC", "ASC", "ASC"]
    assert constraints["leasejobs_run_live_key"]["unique"]


def test_every_failure_code_has_a_meaning():
    assert set(FAILURE_MEANINGS) == set(FailureCode)
    assert "operator" in FailureCode.INTERRUPTED.meaning


# -- L1, A8: a run's lease state, judged at a "now" read from the database ---

DB_NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)  # what the frozen_clock fixture starts at


@pytest.mark.parametrize(
    ("columns", "state"),
    [
        # A pass in flight: begun, and its lease lasts past now (L4, L7).
        ({"lease_owner": "o", "lease_began_at": -30, "next_attempt_at": 30}, LeaseState.LEASED),
        # Claimed, BEGIN not yet written (L2, L4).
        ({"lease_owner": "o", "lease_began_at": None, "next_attempt_at": 30}, LeaseState.CLAIMED),
        # Begun, and its expiry has passed: due to be taken over (L3).
        ({"lease_owner": "o", "lease_began_at": -90, "next_attempt_at": -1}, LeaseState.EXPIRED),
        # A claim never begun, run out too.
        ({"lease_owner": "o", "lease_began_at": None, "next_attempt_at": 0}, LeaseState.EXPIRED),
        # Refused by its limit, waiting for it -- also while a new claim asks it again (C5).
        ({"throttled_by": Throttle.RATE, "next_attempt_at": 30}, LeaseState.THROTTLED),
        (
            {"throttled_by": Throttle.CONCURRENCY, "lease_owner": "o", "next_attempt_at": 30},
            LeaseState.THROTTLED,
        ),
        # No lease: waiting for its due time, or due now.
        ({"next_attempt_at": 30}, LeaseState.FREE),
        ({"next_attempt_at": -30}, LeaseState.FREE),
    ],
)
def test_l1_a8_lease_state_answers_each_state_from_the_row_and_a_now(columns, state):
    """One method judges a run's lease for the admin, ``leasejobs_status`` and the task
    results, from the row's columns and a *now* the caller read once from the database."""
    values = {
        name: DB_NOW + timedelta(seconds=value) if isinstance(value, int) else value
        for name, value in columns.items()
    }
    run = Run(status=RunStatus.RUNNING, **values)
    assert run.lease_state(DB_NOW) == state


@pytest.mark.parametrize("status", [s for s in RunStatus if s != RunStatus.RUNNING])
def test_l1_a8_a_run_that_is_not_running_holds_no_lease(status):
    """Only a running run's lease is judged: a held run or one cancelled mid-pass is free
    (the lease a cancelled pass keeps is its key's business, not a lease to show)."""
    run = Run(status=status, lease_owner="o", lease_began_at=DB_NOW, next_attempt_at=DB_NOW)
    assert run.lease_state(DB_NOW - timedelta(seconds=1)) == LeaseState.FREE


def test_l1_a8_a_lease_run_out_by_the_database_clock_is_expired_while_the_web_clock_is_behind(
    frozen_clock, monkeypatch
):
    """The web server's clock is ten minutes behind the database's: by its clock the lease
    still has nine minutes left. What the admin and ``leasejobs_status`` show is the
    database's verdict (L1, A8): expired."""
    web_now = DB_NOW - timedelta(minutes=10)
    monkeypatch.setattr(timezone, "now", lambda: web_now)
    run = RunFactory(
        started_at=DB_NOW - timedelta(hours=1),
        lease_owner="o",
        lease_holder="web-1:4242:1700000000:ns",
        lease_began_at=DB_NOW - timedelta(minutes=2),
        next_attempt_at=DB_NOW - timedelta(minutes=1),
    )
    assert run.next_attempt_at > timezone.now()  # unexpired by the web server's clock
    now = get_clock().now("default")
    assert now == DB_NOW
    assert Run.objects.get(pk=run.pk).lease_state(now) == LeaseState.EXPIRED
    (entry,) = [entry for entry in as_json()["runs"] if entry["id"] == run.pk]
    assert (entry["lease"], entry["lease_expired"]) == ("expired", True)
    assert lease_text(run, now).startswith("web-1 pid 4242, expired at")
