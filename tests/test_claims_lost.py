"""O2, revision 4: ``leasejobs_claims_lost_total`` counts claims another worker process won.

One worker process alone, at any ``--concurrency``, with throttled, paused and
deferred runs, never raises it -- its own threads making its snapshot stale
is no contention -- and two workers racing for the same runs do.
"""

from __future__ import annotations

import time

import pytest

from django_leasejobs import RunStatus, pause_queue, start, start_many
from django_leasejobs.bookkeeper import Bookkeeper
from django_leasejobs.cursor import DueCursor
from django_leasejobs.due import DriveOptions, DueKey
from django_leasejobs.holder import current_holder
from django_leasejobs.metrics import WorkerMetrics
from django_leasejobs.models import Run
from django_leasejobs.report import DriveReport
from tests.processes import django_command
from tests.test_metrics_worker import free_port, scrape, value
from tests.utils import stop_worker, wait_for

LOST = "leasejobs_claims_lost_total"


def _walk(keys):
    options = DriveOptions("default", {}, max_passes=1, stop=lambda: False)
    return DueCursor(keys, options, limit=1, books=Bookkeeper(DriveReport()))


@pytest.mark.django_db
def test_o2_a_lost_claim_counts_only_when_another_process_made_the_last_claim():
    ours = start("tests.noop", instance="ours").run
    theirs = start("tests.noop", instance="theirs").run
    never = start("tests.noop", instance="never").run
    Run.objects.filter(pk=ours.pk).update(lease_holder=current_holder())
    Run.objects.filter(pk=theirs.pk).update(lease_holder="elsewhere:4242:1:4026531836.abc")
    keys = [DueKey(run.pk, "tests.noop", took_over=False) for run in (ours, theirs, never)]
    metrics = WorkerMetrics()
    metrics.install()
    try:
        walk = _walk(keys)
        for key in keys:
            walk.lost(key)
        assert metrics.registry.get_sample_value(LOST) == 1  # only the other process's
    finally:
        metrics.uninstall()
    walk.lost(keys[1])  # nothing counts once uninstalled
    assert metrics.registry.get_sample_value(LOST) == 1


def _worker(port, *jobs, concurrency=4):
    names = [arg for job in jobs for arg in ("--job", job)]
    return django_command(
        "rundueJobs", "--loop", "--interval", "0.1", "--concurrency", str(concurrency),
        "--metrics-port", str(port), *names,
    )  # fmt: skip


@pytest.mark.django_db(transaction=True)
@pytest.mark.concurrency
def test_o2_one_worker_alone_with_throttled_paused_and_deferred_runs_loses_no_claim():
    """Runs of a job limited to one pass at once (throttled while the others wait), runs
    that Defer for ten seconds, a paused queue's runs, and plain runs, one process at
    ``--concurrency 4``: every drive's snapshot goes stale under its own threads' feet
    (a run throttled or deferred since it was read), and none of it is a lost claim."""
    until = time.time() + 10
    limited = start_many("tests.w5.limited_one", [(f"l{n}", {"sleep": 0.05}) for n in range(40)])
    deferring = start_many("tests.deferring", [(f"d{n}", {"until": until}) for n in range(10)])
    plain = start_many("tests.noop", [(f"n{n}", None) for n in range(200)])
    paused = [start("tests.noop", instance=f"p{n}", queue="mail").run for n in range(10)]
    assert pause_queue("mail", by="ops")
    port = free_port()
    worker = _worker(port, "tests.w5.limited_one", "tests.deferring", "tests.noop")
    try:
        runs = [result.run.pk for result in (*limited, *deferring, *plain)]
        wait_for(
            lambda: Run.objects.filter(pk__in=runs, status=RunStatus.DONE).count() == len(runs),
            "every run not paused to be done",
            worker=worker,
        )
        found = wait_for(lambda: scrape(port), "the worker's metrics", worker=worker)
        assert value(found, "leasejobs_passes_total", outcome="throttled") > 0  # it was tried
        assert value(found, "leasejobs_passes_total", outcome="deferred") > 0
        assert value(found, LOST) == 0
        assert not Run.objects.filter(pk__in=[run.pk for run in paused], attempts__gt=0).exists()
    finally:
        stop_worker(worker)


@pytest.mark.django_db(transaction=True)
@pytest.mark.concurrency
def test_o2_two_workers_racing_for_the_same_runs_count_the_claims_they_lose():
    runs = [
        result.run.pk for result in start_many("tests.noop", [(f"r{n}", None) for n in range(3000)])
    ]
    ports = [free_port(), free_port()]
    workers = [_worker(port, "tests.noop", concurrency=2) for port in ports]
    try:
        wait_for(
            lambda: Run.objects.filter(pk__in=runs, status=RunStatus.DONE).count() == len(runs),
            "every run to be done",
            120,
        )
        lost = 0.0
        for port, worker in zip(ports, workers, strict=True):
            lost += value(wait_for(lambda p=port: scrape(p), "metrics", worker=worker), LOST)
        assert lost > 0
    finally:
        for worker in workers:
            try:
                stop_worker(worker)
            finally:
                if worker.poll() is None:
                    worker.kill()
                    worker.communicate()
