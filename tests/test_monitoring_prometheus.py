"""A real Prometheus scraping a real worker and the metrics view (SPEC §16, O2 revision 4).

``/usr/bin/prometheus`` (Debian's ``prometheus``; ``-m tools``) scrapes, every
second, a ``rundueJobs --loop --metrics-port`` worker process and the metrics
view served by a real HTTP server, under the scrape job names the shipped
rules assume, and evaluates the shipped rules. Everything is read back
through Prometheus's HTTP API, as Grafana and Alertmanager would.
"""

from __future__ import annotations

import math
import re
import time
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from django.utils import timezone

from django_leasejobs import RunStatus, pause_queue, start
from django_leasejobs.models import Run
from tests.monitoring.prometheus import Prometheus
from tests.monitoring.shipped import (
    WORKERS_JOB,
    dashboard,
    every_expr,
    grouping,
    panel_queries,
    recordings,
)
from tests.processes import django_command, end
from tests.utils import free_port, wait_for

pytestmark = [pytest.mark.tools, pytest.mark.concurrency, pytest.mark.django_db(transaction=True)]

WAIT = 60
TOKEN = "scrape-token-0123456789abcdef"
ALPHA, BETA, BROKEN = "tests.monitored.alpha", "tests.monitored.beta", "tests.monitored.broken"
#: A queue the worker serves but is paused, and one it does not serve: both with runs
#: due for an hour.
PAUSED, UNSERVED = "held-back", "unserved"
DRIVEN = {(ALPHA, "completed"): 3.0, (BETA, "completed"): 2.0, (BROKEN, "failed"): 1.0}
PER_JOB = {(ALPHA,): 3.0, (BETA,): 2.0, (BROKEN,): 1.0}


class Watched:
    """The worker and the Prometheus that scrapes it, for one test."""

    def __init__(self, worker, prometheus: Prometheus) -> None:
        self.worker = worker
        self.prometheus = prometheus

    def alive(self) -> None:
        assert self.worker.poll() is None, f"the worker exited: {self.worker.communicate()}"
        assert self.prometheus.process is not None
        assert self.prometheus.process.poll() is None, self.prometheus.tail()

    def settled(self, read, expected, seconds: float = WAIT):
        """Poll *read* until it returns *expected* or *seconds* pass; the last reading."""
        deadline = time.monotonic() + seconds
        while True:
            self.alive()
            seen = read()
            if seen == expected or time.monotonic() > deadline:
                return seen
            time.sleep(0.25)

    def values(self, expr: str, *labels: str) -> dict[tuple[str, ...], float]:
        return self.prometheus.values(expr, *labels)


@pytest.fixture
def watched(tmp_path, live_server, settings):
    """A worker of the three monitored jobs and a Prometheus scraping it and the view.

    Both processes are ended here (SIGTERM, wait, SIGKILL, reaped), whatever the
    test did.
    """
    settings.LEASEJOBS = {**getattr(settings, "LEASEJOBS", {}), "METRICS_TOKEN": TOKEN}
    port = free_port()
    view = urlsplit(live_server.url).netloc
    prometheus = Prometheus(tmp_path, view=view, token=TOKEN, worker=f"127.0.0.1:{port}")
    worker = None
    try:
        worker = django_command(
            *("rundueJobs", "--loop", "--interval", "0.2", "--metrics-port", str(port)),
            *("--job", ALPHA, "--job", BETA, "--job", BROKEN),
            *("--queue", "default", "--queue", PAUSED),
        )
        prometheus.start(WAIT)
        yield Watched(worker, prometheus)
    finally:
        if worker is not None:
            end(worker)
        if prometheus.process is not None:
            end(prometheus.process)


def due_for_an_hour(job: str, instance: str, queue: str) -> None:
    run = start(job, instance=instance, queue=queue).run
    Run.objects.filter(pk=run.pk).update(next_attempt_at=timezone.now() - timedelta(hours=1))


def test_o2_r4_a_real_prometheus_sees_job_name_a_first_failure_and_every_shipped_query(watched):
    """O2 rev. 4 end to end: per-job series keyed by ``job_name`` equal what was driven, in
    the worker's families and the view's; job C's first failure in a fresh worker fires
    LeasejobsPassFailed; a paused queue does not lag while an unserved one does; every
    rule is healthy; and every dashboard and rule query runs, the determinate ones
    answering the driven numbers per job."""
    failed_at_zero = (
        f'leasejobs_passes_total{{job="{WORKERS_JOB}", job_name="{BROKEN}", '
        'queue="default", outcome="failed"}'
    )
    # The fresh worker's series exist at 0 before anything is driven (a scrape has them).
    assert watched.settled(lambda: watched.values(failed_at_zero), {(): 0.0}) == {(): 0.0}

    pause_queue(PAUSED, by="ops")
    for n in range(2):
        due_for_an_hour(ALPHA, f"paused-{n}", PAUSED)
    due_for_an_hour(ALPHA, "unserved", UNSERVED)
    for n in range(3):
        start(ALPHA, instance=f"a{n}")
    for n in range(2):
        start(BETA, instance=f"b{n}")
    start(BROKEN)
    wait_for(
        lambda: (
            Run.objects.filter(job__in=[ALPHA, BETA], status=RunStatus.DONE).count() == 5
            and Run.objects.filter(job=BROKEN, status=RunStatus.FAILED).count() == 1
        ),
        "the worker to drive the six runs",
        WAIT,
        worker=watched.worker,
    )

    # The worker's own families, per job_name (Prometheus's `job` is the scrape job's).
    passes = f'sum by (job_name, outcome) (leasejobs_passes_total{{job="{WORKERS_JOB}"}}) > 0'
    assert watched.settled(lambda: watched.values(passes, "job_name", "outcome"), DRIVEN) == DRIVEN
    timed = f'sum by (job_name) (leasejobs_pass_seconds_count{{job="{WORKERS_JOB}"}}) > 0'
    assert watched.values(timed, "job_name") == PER_JOB

    # C's first failure in this worker's life fires the alert -- through the worker's
    # counter alone, whose series was scraped at 0 first.
    firing = {(BROKEN, "default"): "firing"}
    alerts = watched.settled(lambda: watched.prometheus.alerts("LeasejobsPassFailed"), firing)
    assert alerts == firing
    increase = "job_name_queue:leasejobs_passes_failed:increase15m"
    found = watched.values(increase, "job_name")
    assert {key for key, value in found.items() if value > 0} == {(BROKEN,)}
    assert found[(ALPHA,)] == found[(BETA,)] == 0

    # The view's families, per job_name, once the worker has flushed its statistics (O1).
    window = "job_name_queue_outcome:leasejobs_passes_15m:max"
    expected = {(job, "default", outcome): n for (job, outcome), n in DRIVEN.items()}
    seen = watched.settled(lambda: watched.values(window, "job_name", "queue", "outcome"), expected)
    assert seen == expected
    durations = "sum by (job_name) (max by (job_name, queue) (leasejobs_pass_seconds_15m_count))"
    assert watched.values(durations, "job_name") == PER_JOB
    assert watched.prometheus.query('count({exported_job!=""})') == []
    assert watched.prometheus.query('{__name__=~"leasejobs_pass(es)?_.+", job_name=""}') == []

    # A lagging queue that is paused is quiet; one no worker serves is pending (for: 10m).
    lagging = watched.settled(
        lambda: watched.prometheus.alerts("LeasejobsQueueLagging"), {("", UNSERVED): "pending"}
    )
    assert lagging == {("", UNSERVED): "pending"}
    oldest = watched.values("queue:leasejobs_oldest_due_seconds:max", "queue")
    assert oldest[(PAUSED,)] >= 3600
    assert watched.values("queue:leasejobs_queue_paused:max == 1", "queue") == {(PAUSED,): 1.0}

    # Every shipped rule is loaded and healthy, and every shipped query runs.
    loaded = watched.prometheus.rules()
    assert {rule["name"] for rule in loaded} >= set(recordings())
    assert [(r["name"], r.get("lastError")) for r in loaded if r["health"] != "ok"] == []
    answers = {where: watched.prometheus.query(expr) for where, expr in every_expr().items()}

    def per(where: str, *labels: str) -> dict[tuple[str, ...], float]:
        return {
            tuple(found["metric"].get(label, "") for label in labels): float(found["value"][1])
            for found in answers[where]
        }

    assert per("panel Passes per job in the last 15 minutes [A]", "job_name", "outcome") == DRIVEN
    failed = per("panel Failed runs per job in the last 15 minutes [A]", "job_name", "queue")
    assert failed == {(BROKEN, "default"): 1.0}
    due = per("panel Due runs per queue [A]", "queue")
    assert (due[(PAUSED,)], due[(UNSERVED,)]) == (2.0, 1.0)
    assert per("panel Paused queues [A]", "queue") == {(PAUSED,): 1.0}
    for title in ("Held runs", "Stalled runs", "Throttled runs", "Overdue schedules"):
        assert per(f"panel {title} [A]") == {(): 0.0}, title
    (lost,) = per("panel Claims lost per worker [A]", "instance").values()
    assert lost == 0  # one worker process alone never loses a claim
    ratio = per("panel Failure ratio per job (workers) [A]", "job_name")
    assert (ratio[(ALPHA,)], ratio[(BETA,)], ratio[(BROKEN,)]) == (0.0, 0.0, 1.0)
    for title in (
        "p95 pass duration per job (workers)",
        "p95 pass duration per job over 15 minutes (every worker and cron)",
    ):
        quantiles = per(f"panel {title} [A]", "job_name")
        assert {job for (job,) in quantiles if not math.isnan(quantiles[(job,)])} == {
            ALPHA,
            BETA,
            BROKEN,
        }, title
    # The dashboard's variables list the driven jobs and queues, as Grafana asks for them.
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            selector, label = re.fullmatch(
                r"label_values\((.+), (\w+)\)", variable["definition"]
            ).groups()
            listed = set(watched.prometheus.api(f"label/{label}/values", **{"match[]": selector}))
            assert (
                listed >= {"job_name": {ALPHA, BETA, BROKEN}, "queue": {"default", PAUSED}}[label]
            )
    # A query grouped by job_name answers under job_name, never under another label.
    for where, expr in panel_queries().items():
        if ["job_name" in labels for labels in grouping(expr)[:1]] == [True]:
            assert all("job_name" in found["metric"] for found in answers[f"panel {where}"]), where
