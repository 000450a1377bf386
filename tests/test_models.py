"""The models: tolerant decoding of malformed rows (A2, R9), keys and indexes (§2)."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction

from django_leasejobs.models import Run, Step
from django_leasejobs.states import FAILURE_MEANINGS, FailureCode, RunStatus
from tests.factories import RunFactory, StepFactory

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
