"""F12: metrics and statistics never cost a pass (SPEC §17, O1, O2).

Whatever a live-metrics hook (``rundueJobs --metrics-port``'s, or any in
``django_leasejobs.stats.observers``) or the recording of pass statistics
raises, the pass it was counting is not abandoned, failed, charged or held, the
drive goes on to the next run, and the failure is logged once per kind and
process. (Tracing: tests/test_tracing.py.)
"""

from __future__ import annotations

import logging
import threading

import pytest
from django.db import connections

from django_leasejobs import Retry, contained, start, stats
from django_leasejobs.bookkeeper import Bookkeeper
from django_leasejobs.cursor import DueCursor
from django_leasejobs.due import DriveOptions, DueKey
from django_leasejobs.report import DriveReport
from tests.utils import fresh

pytestmark = pytest.mark.django_db(transaction=True)


class Broken(Exception):
    """What the integration under test raises."""


def _raise(*args, **kwargs):
    raise Broken("the integration is broken")


@pytest.fixture(autouse=True)
def _logged_afresh(monkeypatch, caplog):
    """Each test sees each kind's first failure logged; and no hook left behind."""
    monkeypatch.setattr(contained, "_logged", set())
    caplog.set_level(logging.WARNING, logger="django_leasejobs")
    hooks = [(each, list(each)) for each in (stats.observers, stats.lost_observers)]
    yield  # the lists themselves are imported by name elsewhere: kept, their items restored
    for each, items in hooks:
        each[:] = items


def _failures(caplog, kind: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"{kind} failed")]


def _three_passes(define, drive, concurrency: int):
    """Three runs of a one-attempt job, driven once: the report and the runs as stored."""
    calls = []

    def handler(p):
        calls.append(p.run.instance)
        p.step("one", lambda: 1)
        return p.done()

    spec = define("t.f12.counted", handler, retry=Retry(max_attempts=1))
    runs = [start(spec, instance=f"r{n}").run for n in range(3)]
    report = drive(spec, concurrency=concurrency)
    return report, [fresh(run) for run in runs], calls


@pytest.mark.parametrize("concurrency", [1, 2])
def test_f12_a_metrics_hook_that_raises_costs_no_pass(define, drive, caplog, concurrency):
    """A hook of the live metrics raises for every pass: all three complete, none
    charged an attempt or left leased, none reported as an error; one line in the log."""
    stats.observers.append(_raise)
    report, runs, calls = _three_passes(define, drive, concurrency)
    assert (report.attempted, report.completed, report.failed, report.errors) == (3, 3, 0, [])
    assert sorted(calls) == ["r0", "r1", "r2"]
    assert [(run.status, run.attempts, run.lease_owner) for run in runs] == [("done", 0, None)] * 3
    (logged,) = _failures(caplog, "Pass metrics")
    assert "the integration is broken" in logged


@pytest.mark.parametrize("concurrency", [1, 2])
def test_f12_statistics_that_cannot_be_recorded_cost_no_pass(
    define, drive, caplog, monkeypatch, concurrency
):
    """Counting a pass in O1's figures raises: every pass completes all the same, the
    metrics hooks still hear of each, and the failure is logged once."""
    monkeypatch.setattr(stats.Tally, "add", _raise)
    heard = []
    stats.observers.append(lambda job, queue, outcome, seconds: heard.append(outcome))
    report, runs, _calls = _three_passes(define, drive, concurrency)
    assert (report.completed, report.failed, report.errors) == (3, 0, [])
    assert {(run.status, run.attempts) for run in runs} == {("done", 0)}
    assert heard == ["completed"] * 3
    assert len(_failures(caplog, "Pass statistics")) == 1


def test_f12_a_claims_lost_hook_that_raises_leaves_the_drive_to_go_on(monkeypatch, caplog):
    """A lost claim is counted for the metrics by a read and a hook (O2): either may
    raise, and the drive still steps on along its snapshot."""
    stats.lost_observers.append(_raise)
    keys = [DueKey(f"id{n}", "t.f12.lost", False) for n in range(4)]
    options = DriveOptions("default", {}, max_passes=1, stop=lambda: False)
    walk = DueCursor(keys, options, limit=10, books=Bookkeeper(DriveReport()))
    monkeypatch.setattr("django_leasejobs.cursor.store.claimed_elsewhere", lambda *a: True)
    walk.lost(keys[0])  # the hook raises
    monkeypatch.setattr("django_leasejobs.cursor.store.claimed_elsewhere", _raise)
    walk.lost(keys[0])  # the read raises
    assert len(_failures(caplog, "Claim metrics")) == 1


def test_f12_worker_metrics_that_raise_count_nothing_and_cost_nothing(
    define, drive, caplog, monkeypatch
):
    """``--metrics-port``'s own counters: a registry that refuses a label, and a
    connection gauge that cannot note a connection as it opens -- on the pass threads
    (W5), where a failure in Django's ``connection_created`` would fail the connect.
    The passes complete, each kind logged once."""
    from django_leasejobs.metrics import WorkerMetrics

    metrics = WorkerMetrics()
    metrics.install()  # each job's series at 0 first (O2)
    monkeypatch.setattr(metrics.passes, "labels", _raise)
    monkeypatch.setattr(metrics.connections, "_seen", type("Full", (), {"add": _raise})())
    try:
        # A connection opened on a thread of its own, as a pass thread's or a heartbeat's is.
        opened = []
        thread = threading.Thread(
            target=lambda: (
                connections["default"].ensure_connection(),
                opened.append(connections["default"].is_usable()),
                connections.close_all(),
            )
        )
        thread.start()
        thread.join()
        report, runs, _calls = _three_passes(define, drive, 2)
    finally:
        metrics.uninstall()
    assert opened == [True]
    assert (report.completed, report.failed, report.errors) == (3, 0, [])
    assert {run.status for run in runs} == {"done"}
    assert len(_failures(caplog, "Worker metrics")) == 1
    assert len(_failures(caplog, "Connection metrics")) == 1
