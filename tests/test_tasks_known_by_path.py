"""SPEC §9 revision 4: a task is known by its path, not by the built-in job's name.

A run of a Django task is a run of ``django_leasejobs.task``; its pass
statistics (O1), metrics labels (O2: the view and a worker's ``/metrics``),
spans (O3), the overview's per-job table (O4) and ``leasejobs_status`` name
it by its task's module path (:func:`django_leasejobs.known.known_as`).
"""

from __future__ import annotations

import pytest
from django.db.models import Sum
from django.test import Client
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from django_leasejobs import PassOutcome, RunStatus
from django_leasejobs.figures.failures import lookups_for
from django_leasejobs.known import JOB_NAME_LENGTH, known_as
from django_leasejobs.metrics import WorkerMetrics
from django_leasejobs.models import PassStat, Run
from django_leasejobs.stats import aggregate
from django_leasejobs.tasks import TASK_JOB
from tests import tasks
from tests.processes import django_command
from tests.task_helpers import drive
from tests.test_admin_overview import OVERVIEW, Page
from tests.test_metrics_worker import scrape, value
from tests.test_tracing import spans  # noqa: F401 - the fixture: one tracer provider a process
from tests.utils import as_json, free_port, status, stop_worker, user_with, wait_for

ADD = "tests.tasks.add"
EXPLODE = "tests.tasks.explode"
WAIT = 60


@pytest.fixture
def counted():
    """Pass statistics from this test's passes only, none left for the next."""
    aggregate.forget()
    yield aggregate
    aggregate.forget()


def _both_run():
    """One run of ``add`` that completes and one of ``explode`` that fails (one attempt)."""
    tasks.add.enqueue(1, 2)
    tasks.explode.enqueue()
    report = drive()
    assert (report.completed, report.failed) == (1, 1)


def _samples(text: str) -> list:
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


# -- the one name (§9) ----------------------------------------------------------------------------


def test_s9_known_as_is_a_task_runs_path_and_any_other_runs_job():
    assert known_as(TASK_JOB, ADD) == ADD
    assert known_as("reports.nightly", "2026-12-04") == "reports.nightly"
    # A task run whose row could not be read back: its instance is unknown.
    assert known_as(TASK_JOB, None) == TASK_JOB
    long = "shop." + "a" * 200 + ".send"
    assert known_as(TASK_JOB, long) == long[:JOB_NAME_LENGTH]  # as the statistics' column holds


def test_s9_a_registered_jobs_name_is_its_runs_and_any_other_is_a_job_or_a_task():
    assert lookups_for("tests.noop") == [{"job": "tests.noop"}]
    assert lookups_for(ADD) == [{"job": ADD}, {"job": TASK_JOB, "instance": ADD}]


# -- O1: pass statistics --------------------------------------------------------------------------


@pytest.mark.django_db
def test_s9_o1_a_task_runs_passes_are_counted_under_its_path(counted):
    _both_run()
    assert counted.flush(force=True) == 2
    rows = PassStat.objects.values_list("job", "outcome").annotate(n=Sum("count"))
    assert sorted(rows) == [(ADD, "completed", 1), (EXPLODE, "failed", 1)]
    assert not PassStat.objects.filter(job=TASK_JOB).exists()


# -- O2: the metrics view and a worker's /metrics -------------------------------------------------


@pytest.mark.django_db
def test_s9_o2_the_metrics_view_labels_a_task_runs_passes_with_its_path(counted):
    _both_run()
    counted.flush(force=True)
    client = Client()
    client.force_login(user_with("view_run"))
    response = client.get("/metrics/leasejobs")
    assert response.status_code == 200
    found = _samples(response.content.decode())
    passes = {
        (s.labels["job_name"], s.labels["outcome"]): s.value
        for s in found
        if s.name == "leasejobs_passes_15m"
    }
    assert passes == {(ADD, "completed"): 1, (EXPLODE, "failed"): 1}
    durations = {s.labels["job_name"] for s in found if s.name.startswith("leasejobs_pass_sec")}
    assert durations == {ADD, EXPLODE}


@pytest.mark.django_db
def test_s9_o2_a_workers_series_of_a_task_path_exist_at_0_once_it_is_first_seen():
    """Zero-init for a name no process knows in advance: the first pass of a task
    creates each outcome's series of its path, so its first failure is an increase."""
    metrics = WorkerMetrics()
    metrics.install()
    try:
        tasks.add.enqueue(1, 2)
        assert drive().completed == 1
        found = _samples(generate_latest(metrics.registry).decode())
    finally:
        metrics.uninstall()
    by_outcome = {
        s.labels["outcome"]: s.value
        for s in found
        if s.name == "leasejobs_passes_total" and s.labels["job_name"] == ADD
    }
    assert by_outcome == {str(outcome): 0 for outcome in PassOutcome} | {"completed": 1}
    assert not [s for s in found if s.labels.get("job_name") == TASK_JOB]


@pytest.mark.django_db(transaction=True)
@pytest.mark.concurrency
def test_s9_o2_a_real_workers_metrics_port_labels_task_runs_with_their_paths():
    port = free_port()
    tasks.add.enqueue(1, 2)
    worker = django_command(
        "rundueJobs",
        "--loop",
        "--interval",
        "0.2",
        "--job",
        TASK_JOB,
        "--concurrency",
        "2",  # named on a pass thread, counted by the drive (W5)
        "--metrics-port",
        str(port),
    )
    try:

        def passes(job, outcome):
            found = scrape(port)
            if found is None:
                return -1
            return value(found, "leasejobs_passes_total", job_name=job, outcome=outcome)

        wait_for(lambda: passes(ADD, "completed") == 1, "add's pass scraped", worker=worker)
        before = scrape(port)
        tasks.explode.enqueue()
        wait_for(lambda: passes(EXPLODE, "failed") == 1, "explode's failure scraped", worker=worker)
        after = scrape(port)
    finally:
        if worker.poll() is None:
            stop_worker(worker)
    assert worker.returncode == 0
    add_failed = {"job_name": ADD, "queue": "default", "outcome": "failed"}
    (zero,) = [s for s in before if s.name == "leasejobs_passes_total" and s.labels == add_failed]
    assert zero.value == 0  # its series exists, at 0, from add's first pass
    assert not [s for s in after if s.labels.get("job_name") == TASK_JOB]
    assert value(after, "leasejobs_pass_seconds_count", job_name=EXPLODE) == 1


# -- O3: spans -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_s9_o3_a_task_runs_pass_span_is_named_by_its_path(spans):  # noqa: F811 - the fixture
    run_id = tasks.add.enqueue(1, 2).id
    drive()
    (span,) = [s for s in spans.get_finished_spans() if s.name.startswith("leasejobs.pass ")]
    assert span.name == f"leasejobs.pass {ADD}"
    attributes = dict(span.attributes)
    assert attributes["leasejobs.job"] == ADD
    assert attributes["leasejobs.run.id"] == run_id


# -- O4: the overview's per-job table -------------------------------------------------------------


@pytest.mark.django_db
def test_s9_o4_the_overview_lists_each_task_by_its_path_with_its_runs_and_last_failure(counted):
    _both_run()
    counted.flush(force=True)
    failed = Run.objects.get(instance=EXPLODE)
    client = Client()
    client.force_login(user_with("view_run"))
    response = client.get(OVERVIEW)
    jobs = Page(response.content.decode()).jobs()
    assert set(jobs) == {ADD, EXPLODE}
    assert jobs[EXPLODE][:2] == ["1", "1"]  # one pass, one failure
    assert jobs[EXPLODE][5].startswith("handler_failed: ValueError")
    rows = {row["figures"].job: row for row in response.context["jobs"]}
    assert rows[EXPLODE]["failure"].run == failed.pk
    # Each name's links list that task's runs: all of them, then its failed ones.
    for name, link, listed in (
        (ADD, "runs", {Run.objects.get(instance=ADD).pk}),
        (EXPLODE, "runs", {failed.pk}),
        (EXPLODE, "failed", {failed.pk}),
        (ADD, "failed", set()),
    ):
        page = client.get(rows[name][link])
        assert page.status_code == 200
        assert {run.pk for run in page.context["cl"].result_list} == listed, (name, link)


# -- leasejobs_status -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_s9_leasejobs_status_names_a_live_task_run_by_its_path_and_finds_it_by_it():
    run_id = tasks.add.enqueue(1, 2).id
    (entry,) = as_json()["runs"]
    assert (entry["id"], entry["job"], entry["instance"]) == (run_id, ADD, ADD)
    assert [entry["id"] for entry in as_json("--job", ADD)["runs"]] == [run_id]
    assert [entry["id"] for entry in as_json("--job", TASK_JOB)["runs"]] == [run_id]
    assert as_json("--job", EXPLODE)["runs"] == []
    (line,) = [line for line in status().splitlines() if line.startswith(run_id)]
    assert line.split()[1] == ADD
    assert Run.objects.get(pk=run_id).status == RunStatus.RUNNING
