"""The run page's summary (SPEC A8): what an operator needs first, before the full fields."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone
from django.utils.html import escape

from django_leasejobs import operators
from django_leasejobs.admin.summary import first_line
from django_leasejobs.states import FailureCode, RunStatus
from tests.factories import RunFactory

pytestmark = pytest.mark.django_db

RUNS = "/admin/leasejobs/run/"


def summary_of(client, run) -> str:
    content = client.get(f"{RUNS}{run.pk}/change/").content.decode()
    start = content.index('<section class="module leasejobs-summary"')
    end = content.index("</section>", start)
    assert start < content.index("<fieldset")  # before the full fields
    return content[start:end]


def failed_run(**columns):
    return RunFactory(
        status=RunStatus.FAILED,
        failure_code=FailureCode.HANDLER_FAILED,
        attempts=3,
        last_error=(
            "ConnectionError: crm.example.com answered 503 Service Unavailable\n"
            "Traceback (most recent call last):\n  File ..."
        ),
        **columns,
    )


def test_a8_a_failed_runs_summary_has_its_status_failure_and_first_error_line(admin_client):
    run = failed_run()
    shown = summary_of(admin_client, run)
    assert ">Failed</span>" in shown
    assert escape(RunStatus.FAILED.meaning) in shown
    assert "<code>handler_failed</code>" in shown
    assert escape(FailureCode.HANDLER_FAILED.meaning) in shown
    assert "ConnectionError: crm.example.com answered 503 Service Unavailable" in shown
    assert "Traceback" not in shown  # the first line only; the page has the rest
    assert "not due: 3 failed passes in a row" in shown
    assert f'href="{RUNS}{run.pk}/retry/"' in shown  # the actions valid for it
    assert "/cancel/" not in shown


def test_a8_a_cancelled_runs_summary_says_who_cancelled_it(admin_client):
    run = RunFactory()
    assert operators.cancel(run.pk, by="alice")
    shown = summary_of(admin_client, run)
    assert ">Cancelled</span>" in shown
    assert "cancelled by alice" in shown
    assert escape(FailureCode.CANCELLED.meaning) in shown


def test_a8_a_held_runs_summary_offers_its_decisions(admin_client):
    run = RunFactory(status=RunStatus.HELD, failure_code=FailureCode.INTERRUPTED)
    shown = summary_of(admin_client, run)
    assert "waiting for an operator (release: resume or fail)" in shown
    for verb in ("cancel", "release-resume", "release-fail"):
        assert f'href="{RUNS}{run.pk}/{verb}/"' in shown
    assert escape(RunStatus.HELD.meaning) in shown


def test_a8_the_summary_offers_only_the_actions_the_operator_may_take(client, django_user_model):
    viewer = django_user_model.objects.create_user("v", password="x", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_run"))
    client.force_login(viewer)
    run = RunFactory(status=RunStatus.HELD, failure_code=FailureCode.INTERRUPTED)
    shown = summary_of(client, run)
    assert "leasejobs-action" not in shown
    assert "Actions" not in shown


def test_a8_a_throttled_runs_summary_says_which_limit_it_waits_for(admin_client):
    run = RunFactory(
        job="tests.rated",
        throttled_by="rate",
        updated_at=timezone.now(),
        next_attempt_at=timezone.now() + timedelta(seconds=40),
    )
    assert "waiting for its rate limit, until" in summary_of(admin_client, run)


def test_a8_a_run_without_failure_has_no_failure_lines(admin_client):
    shown = summary_of(admin_client, RunFactory())
    assert "Failure" not in shown
    assert "Last error" not in shown
    assert "due now" in shown


def test_a8_first_line_skips_blank_lines_and_cuts_a_long_one():
    assert first_line("\n\n  ValueError: x  \nmore") == "ValueError: x"
    assert first_line("") == ""
    long = first_line("E" * 500)
    assert len(long) == 200
    assert long.endswith("…")
