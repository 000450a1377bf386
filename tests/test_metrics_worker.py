"""``rundueJobs --metrics-port``: a worker process's own counters (SPEC §16 O2, W5)."""

from __future__ import annotations

import socket
import sys
import threading
import urllib.error
import urllib.request

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, connections
from prometheus_client.parser import text_string_to_metric_families

from django_leasejobs import PassOutcome, RunStatus, start
from django_leasejobs.metrics import OpenConnections, WorkerMetrics
from django_leasejobs.models import Run
from django_leasejobs.models.observability import BUCKETS
from django_leasejobs.registry import registry
from django_leasejobs.stats import lost_observers, observers
from django_leasejobs.tasks import TASK_JOB
from tests.processes import django_command, refused_usage
from tests.utils import free_port, stop_worker, wait_for

WAIT = 60
#: Every label name a worker's metrics may use: none can hold a run's own values.
LABEL_NAMES = {"job_name", "queue", "outcome", "le"}


def scrape(port: int) -> list | None:
    """Every sample the worker serves, or ``None`` while nothing listens yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=WAIT) as answer:
            text = answer.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return None
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def value(found, name, **labels) -> float:
    """The sum of the samples called *name* whose labels include *labels* (0 for none)."""
    return sum(s.value for s in found if s.name == name and labels.items() <= s.labels.items())


def completed(port: int) -> float:
    found = scrape(port)
    return -1 if found is None else value(found, "leasejobs_passes_total", outcome="completed")


def untouched(run) -> bool:
    after = Run.objects.get(pk=run.pk)
    return (after.status, after.lease_owner, after.attempts, after.updated_at) == (
        RunStatus.RUNNING,
        None,
        0,
        run.updated_at,
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.concurrency
def test_o2_w5_metrics_port_serves_the_growing_pass_counters_of_a_real_worker():
    """A real ``--loop --concurrency 2`` worker: its counters grow with the passes it runs
    on its pass threads, its histogram counts each, its connections are within W5's
    N + 2, no label holds a run's own values, and the port closes when it exits."""
    port = free_port()
    first = [start("tests.noop", {"who": f"payload-{n}"}, instance=f"a{n}").run for n in range(5)]
    worker = django_command(
        "rundueJobs",
        "--loop",
        "--interval",
        "0.2",
        "--job",
        "tests.noop",
        "--concurrency",
        "2",
        "--metrics-port",
        str(port),
    )
    try:
        wait_for(lambda: completed(port) == 5, "five completed passes scraped", worker=worker)
        second = [start("tests.noop", instance=f"b{n}").run for n in range(4)]
        wait_for(lambda: completed(port) == 9, "nine completed passes scraped", worker=worker)
        found = scrape(port)
    finally:
        if worker.poll() is None:
            stop_worker(worker)
    assert worker.returncode == 0
    assert value(found, "leasejobs_passes_total") == 9
    key = {"job_name": "tests.noop", "queue": "default"}
    assert value(found, "leasejobs_pass_seconds_count", **key) == 9
    assert value(found, "leasejobs_pass_seconds_bucket", le="+Inf", **key) == 9
    buckets = {s.labels["le"] for s in found if s.name == "leasejobs_pass_seconds_bucket"}
    assert buckets == {*(str(bound) for bound in BUCKETS), "+Inf"}
    assert value(found, "leasejobs_throttled_passes_total") == 0
    assert [s.name for s in found if s.name == "leasejobs_claims_lost_total"]
    connections_in_use = value(found, "leasejobs_database_connections")
    # Within W5's N + 2; an idle worker gives its connections back (F10), so no lower bound.
    assert 0 <= connections_in_use <= 2 + 2, connections_in_use
    own = {r.pk for r in first + second} | {r.instance for r in first + second}
    own |= {f"payload-{n}" for n in range(5)}
    for sample in found:
        assert set(sample.labels) <= LABEL_NAMES, sample
        assert not own & set(sample.labels.values()), sample
    assert Run.objects.filter(job="tests.noop", status=RunStatus.DONE).count() == 9
    assert scrape(port) is None  # the worker's server ended with it


@pytest.mark.django_db(transaction=True)
@pytest.mark.concurrency
def test_o2_a_metrics_port_in_use_is_refused_in_one_line_and_nothing_is_driven():
    run = Run.objects.get(pk=start("tests.noop").run.pk)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = django_command(
            "rundueJobs", "--loop", "--job", "tests.noop", "--metrics-port", str(port)
        )
        out, err = command.communicate(timeout=WAIT)
    assert command.returncode == 1, err
    assert out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith(f"CommandError: --metrics-port {port}: cannot listen on 127.0.0.1")
    assert "in use" in line
    assert untouched(run)


@pytest.mark.django_db(transaction=True)
@pytest.mark.concurrency
@pytest.mark.parametrize("port", ["0", "65536", "-1", "abc", "80.5"])
def test_o2_a_bad_metrics_port_is_refused_in_one_line_and_nothing_is_driven(port):
    run = Run.objects.get(pk=start("tests.noop").run.pk)
    lines = refused_usage("--metrics-port", port, "--job", "tests.noop", timeout=WAIT)
    assert f"argument --metrics-port: {port!r}" in lines[-1]
    assert lines[0].startswith("usage:")
    assert untouched(run)


@pytest.mark.django_db
def test_o2_metrics_port_without_prometheus_client_is_refused_before_driving(monkeypatch):
    run = Run.objects.get(pk=start("tests.noop").run.pk)
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if not installed
    with pytest.raises(CommandError, match=r"pip install 'django-leasejobs\[prometheus\]'"):
        call_command("rundueJobs", "--metrics-port", str(free_port()), "--job", "tests.noop")
    assert untouched(run)
    assert (observers, lost_observers) == ([], [])


@pytest.mark.django_db
def test_o2_metrics_address_without_a_port_is_refused():
    with pytest.raises(CommandError, match="--metrics-port"):
        call_command("rundueJobs", "--metrics-address", "0.0.0.0", "--job", "tests.noop")


@pytest.mark.django_db
def test_o2_a_one_shot_serves_while_it_runs_and_stops_after(define):
    """In process: a pass scrapes the command's own port; after the command, nothing
    listens and nothing counts (its hooks are gone)."""
    port = free_port()
    seen = []

    def scraping(p):
        seen.append(scrape(port))
        return p.done()

    define("t.metrics.scraping", scraping)
    start("t.metrics.scraping")
    call_command(
        "rundueJobs", "--metrics-port", str(port), "--job", "t.metrics.scraping", "-v", "0"
    )
    (during,) = seen
    assert during is not None
    assert [s for s in during if s.name == "leasejobs_database_connections"]
    assert scrape(port) is None
    assert (observers, lost_observers) == ([], [])


# -- the counters, in process ------------------------------------------------------------


@pytest.fixture
def counted():
    metrics = WorkerMetrics()
    metrics.install()
    yield metrics
    metrics.uninstall()


def sample(metrics: WorkerMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


@pytest.mark.django_db
def test_o2_each_pass_the_drive_tallies_is_counted_with_its_duration(counted, drive):
    for n in range(3):
        start("tests.noop", instance=f"c{n}", queue="mail")
    assert drive("tests.noop").completed == 3
    key = {"job_name": "tests.noop", "queue": "mail"}
    assert sample(counted, "leasejobs_passes_total", outcome="completed", **key) == 3
    assert sample(counted, "leasejobs_pass_seconds_count", **key) == 3
    assert sample(counted, "leasejobs_pass_seconds_bucket", le="300.0", **key) == 3


@pytest.mark.django_db
def test_o2_c2_a_throttled_pass_is_counted_as_one(counted, frozen_clock, drive):
    from tests.limit_helpers import LIMITED, QUICK, SECOND, hold_slots

    hold_slots(LIMITED, 2, until=frozen_clock.now() + 2 * SECOND)
    start(LIMITED, QUICK, instance="third")
    assert drive(LIMITED).throttled == 1
    assert sample(counted, "leasejobs_throttled_passes_total") == 1
    key = {"job_name": LIMITED, "queue": "default", "outcome": "throttled"}
    assert sample(counted, "leasejobs_passes_total", **key) == 1
    untimed = {"job_name": LIMITED, "queue": "default"}
    assert sample(counted, "leasejobs_pass_seconds_count", **untimed) == 0  # no handler ran


def test_o2_r4_each_registered_jobs_series_exist_at_zero_once_installed(define):
    """O2 rev. 4: ``increase()`` reads a series born at 1 as no increase, so every outcome of
    every job registered here (in the job's own queue) and its duration histogram exist at
    0 before the first pass: a job's first failure in this process is an increase."""
    define("t.metrics.mailer", lambda p: p.done(), queue="mail")
    metrics = WorkerMetrics()
    metrics.install()
    try:
        for spec in [registry.get("tests.noop"), registry.get("t.metrics.mailer")]:
            key = {"job_name": spec.name, "queue": spec.queue}
            for outcome in PassOutcome:
                found = metrics.registry.get_sample_value(
                    "leasejobs_passes_total", {**key, "outcome": outcome}
                )
                assert found == 0.0, (key, outcome)
            assert metrics.registry.get_sample_value("leasejobs_pass_seconds_count", key) == 0.0
        assert (
            metrics.registry.get_sample_value(
                "leasejobs_passes_total",
                {"job_name": "t.metrics.mailer", "queue": "default", "outcome": "failed"},
            )
            is None
        )  # the job's own queue only
        # A task run is counted under its task's path, which no process knows in advance.
        named = {s.labels.get("job_name") for m in metrics.registry.collect() for s in m.samples}
        assert TASK_JOB not in named
    finally:
        metrics.uninstall()


def test_o2_r4_held_and_throttled_passes_are_counted_but_never_timed(counted):
    """No handler ran in a held or throttled pass: a pass of ``leasejobs_passes_total``, never
    a duration of ``leasejobs_pass_seconds`` (its 2 ms of bookkeeping skewed every p50)."""
    key = {"job_name": "t.untimed", "queue": "q"}
    counted.observe("t.untimed", "q", "held", 0.002)
    counted.observe("t.untimed", "q", "throttled", 0.002)
    counted.observe("t.untimed", "q", "completed", 0.5)
    assert sample(counted, "leasejobs_passes_total", outcome="held", **key) == 1
    assert sample(counted, "leasejobs_passes_total", outcome="throttled", **key) == 1
    assert sample(counted, "leasejobs_passes_total", outcome="completed", **key) == 1
    assert sample(counted, "leasejobs_pass_seconds_count", **key) == 1
    assert sample(counted, "leasejobs_pass_seconds_sum", **key) == 0.5
    assert sample(counted, "leasejobs_pass_seconds_bucket", le="0.005", **key) == 0


def test_o2_r4_claims_lost_says_it_counts_only_another_processs_wins(counted):
    """O2 rev. 4: the help an operator reads in Prometheus says what raises the counter."""
    (family,) = [m for m in counted.registry.collect() if m.name == "leasejobs_claims_lost"]
    assert "another worker process" in family.documentation
    assert "One process alone never raises it" in family.documentation


@pytest.mark.django_db(transaction=True)
def test_o2_w5_open_connections_count_every_threads_own():
    """The gauge counts each thread's connection while it is open (W5's N + 2 bound is
    what it shows an operator), and forgets it when the thread closes it."""
    tracker = OpenConnections()
    connection.ensure_connection()
    tracker.start()
    try:
        assert tracker.count() == 1
        release = threading.Event()

        def hold() -> None:
            try:
                connections["default"].ensure_connection()
                release.wait(WAIT)
            finally:
                connections.close_all()

        threads = [threading.Thread(target=hold) for _ in range(2)]
        for thread in threads:
            thread.start()
        wait_for(lambda: tracker.count() == 3, "three connections in use")
        release.set()
        for thread in threads:
            thread.join()
        assert tracker.count() == 1
        connection.close()
        assert tracker.count() == 0
    finally:
        tracker.stop()
