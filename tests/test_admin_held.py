"""A held run's step in flight in the admin (SPEC A8): the page's banner and summary, the
run list, the release confirmations, and the steps table.

The ledger rows are as a job not safe to repeat leaves them (``began_at`` written before a
step runs, cleared with its record): tests/test_in_flight.py makes them by killing real passes.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_leasejobs.states import FailureCode, RunStatus
from tests.factories import RunFactory, StepFactory

pytestmark = pytest.mark.django_db

RUNS = "/admin/leasejobs/run/"
BEGAN = datetime(2026, 3, 1, 11, 56, 0, tzinfo=UTC)


def held(**columns):
    return RunFactory(
        job="tests.fragile",
        status=RunStatus.HELD,
        failure_code=FailureCode.INTERRUPTED,
        **columns,
    )


def stopped_in_a_step():
    """Held after its pass stopped inside ``charge:102``: ``reserve:102`` had completed."""
    run = held()
    StepFactory(run=run, name="reserve:102", result='{"ok": true}', recorded_at=BEGAN)
    StepFactory(run=run, name="charge:102", result=None, attempts=0, began_at=BEGAN)
    return run


def stopped_between_steps():
    run = held()
    StepFactory(run=run, name="reserve:102", result='{"ok": true}', recorded_at=BEGAN)
    return run


def page(client, run) -> str:
    return client.get(f"{RUNS}{run.pk}/change/").content.decode()


def summary(content: str) -> str:
    start = content.index('<section class="module leasejobs-summary"')
    return content[start : content.index("</section>", start)]


def test_a8_the_held_runs_page_names_the_step_in_flight_and_when_it_began(
    admin_client, frozen_clock
):
    run = stopped_in_a_step()
    shown = summary(page(admin_client, run))
    banner = shown[shown.index('id="leasejobs-held-banner"') :]
    banner = banner[: banner.index("</p>")]
    assert "its pass stopped while step <code>charge:102</code> was in flight" in banner
    assert "2026-03-01 11:56:00 UTC</time> (4 min ago)" in banner  # the database's clock
    assert "may have half-happened" in banner
    row = shown[shown.index("leasejobs-summary-in-flight") :]
    assert "step <code>charge:102</code>, begun" in row


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (stopped_between_steps, "no step in flight: the pass stopped after step "),
        (held, "no step had begun when the pass stopped"),
    ],
)
def test_a8_a_held_run_whose_pass_stopped_outside_a_step_says_so(admin_client, make, said):
    shown = summary(page(admin_client, make()))
    assert said in shown
    assert "was in flight" not in shown


def test_a8_only_a_held_run_has_a_banner(admin_client):
    run = RunFactory()
    StepFactory(run=run, name="charge:7", result=None, began_at=BEGAN)  # a pass running it now
    content = page(admin_client, run)
    assert "leasejobs-held-banner" not in content
    assert "leasejobs-summary-in-flight" not in content


def test_a8_the_steps_table_shows_a_step_in_flight_as_such(admin_client):
    content = page(admin_client, stopped_in_a_step())
    table = content[content.index('id="steps-group"') :]
    assert '<strong class="leasejobs-step-in-flight">in flight</strong> since' in table
    assert "2026-03-01 11:56:00 UTC" in table
    assert "<p>yes</p>" in table  # reserve:102 completed, in words


def test_a8_an_empty_ledger_is_said_in_a_line_not_an_empty_table(admin_client):
    content = page(admin_client, held())
    assert "No step recorded" in content
    assert 'id="steps-group"' not in content  # no empty inline table


def test_a8_the_held_list_names_each_held_runs_step_in_flight(admin_client, frozen_clock):
    in_step, between, before = stopped_in_a_step(), stopped_between_steps(), held()
    content = admin_client.get(RUNS, {"held": "yes"}).content.decode()

    def due(run):
        row = content[content.index(f'title="{run.pk}"') :]
        cell = row[row.index('class="field-next_due_display"') :]
        return cell[: cell.index("</td>")]

    assert "step <code>charge:102</code> in flight, begun <time" in due(in_step)
    assert ">4 min ago</time>" in due(in_step)
    assert "after step <code>reserve:102</code> completed" in due(between)
    assert "no step had begun" in due(before)


def test_a8_the_held_list_reads_every_step_in_flight_in_one_statement(admin_client):
    stopped_in_a_step()
    with CaptureQueriesContext(connection) as one:
        admin_client.get(RUNS)
    for _ in range(5):
        stopped_in_a_step()
    with CaptureQueriesContext(connection) as six:
        admin_client.get(RUNS)
    assert len(six) == len(one)


def test_a8_release_resume_says_which_step_runs_again(admin_client):
    run = stopped_in_a_step()
    asked = admin_client.get(f"{RUNS}{run.pk}/release-resume/").content.decode()
    assert "Step <code>charge:102</code> runs again" in asked
    assert "2026-03-01 11:56:00 UTC" in asked
    failing = admin_client.get(f"{RUNS}{run.pk}/release-fail/").content.decode()
    assert "step <code>charge:102</code> was in flight" in failing


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (stopped_between_steps, "the pass stopped after step <code>reserve:102</code> completed"),
        (held, "No step had begun when the pass stopped: it runs from its start."),
    ],
)
def test_a8_release_resume_of_a_pass_stopped_outside_a_step_says_so(admin_client, make, said):
    run = make()
    asked = admin_client.get(f"{RUNS}{run.pk}/release-resume/").content.decode()
    assert said in asked
    assert "runs again:" not in asked


def test_a8_a_held_run_s_step_in_flight_is_judged_on_the_databases_clock(
    admin_client, frozen_clock
):
    frozen_clock.set(BEGAN + timedelta(hours=2))
    shown = summary(page(admin_client, stopped_in_a_step()))
    assert "(2 h ago)" in shown
