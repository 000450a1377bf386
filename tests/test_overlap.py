"""L2/L6 under real concurrency: 4 worker processes drive the same 200 runs.

Each handler logs who ran it and when (machine-wide monotonic clock); if two
workers ever ran passes of one run at the same time, two logged intervals of
that run overlap and the test fails. Counters and side effects must be exact.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

import pytest

from django_leasejobs import RunStatus, start
from django_leasejobs.models import Run
from tests.models import Effect, PassLog
from tests.processes import run_together

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]

RUNS = 200
PASSES = 3
STEPS = 2
WORKERS = 4


def test_l2_l6_four_workers_never_overlap_on_a_run_and_counters_are_exact():
    payload = {"passes": PASSES, "steps": STEPS, "sleep": 0.005}
    runs = [start("tests.counted_walk", payload, instance=f"r{n}").run for n in range(RUNS)]

    totals = run_together("tests.processes.drain", WORKERS, "tests.counted_walk", 240.0)

    assert sum(t["completed"] for t in totals) == RUNS
    assert sum(t["superseded"] for t in totals) == 0
    assert sum(t["advanced"] for t in totals) == RUNS * (PASSES - 1)
    assert Run.objects.filter(job="tests.counted_walk", status=RunStatus.DONE).count() == RUNS
    for run in Run.objects.filter(pk__in=[r.pk for r in runs]):
        assert run.decoded_counters().value == {"steps": PASSES * STEPS, "passes": PASSES}

    intervals = defaultdict(list)
    for log in PassLog.objects.all():
        intervals[log.run_id].append((log.started_ns, log.ended_ns, log.pid))
    assert len(intervals) == RUNS
    overlaps = []
    for run_id, spans in intervals.items():
        spans.sort()
        overlaps += [
            (run_id, earlier, later)
            for earlier, later in itertools.pairwise(spans)
            if later[0] < earlier[1]
        ]
    assert overlaps == []
    assert sum(len(spans) for spans in intervals.values()) == RUNS * PASSES

    effects = defaultdict(int)
    for run_id, name in Effect.objects.values_list("run_id", "name"):
        effects[run_id, name] += 1
    assert len(effects) == RUNS * PASSES * STEPS
    assert set(effects.values()) == {1}  # no step body ran twice
    assert len({log.pid for log in PassLog.objects.all()}) > 1  # the work was really shared


def test_l2_l4_short_passes_claimed_ahead_by_four_workers_each_run_once():
    # No-op passes: each worker soon claims runs ahead of their turn, ten in one
    # statement (django_leasejobs.pacing). Each run must still be run once.
    payload = {"passes": 1, "steps": 0}
    runs = [start("tests.counted_walk", payload, instance=f"q{n}").run for n in range(400)]

    totals = run_together("tests.processes.drain", WORKERS, "tests.counted_walk", 240.0)

    assert sum(t["completed"] for t in totals) == len(runs)
    assert Run.objects.filter(job="tests.counted_walk", status=RunStatus.DONE).count() == len(runs)
    passes = defaultdict(int)
    for run_id in PassLog.objects.values_list("run_id", flat=True):
        passes[run_id] += 1
    assert len(passes) == len(runs)
    assert set(passes.values()) == {1}  # no pass ran twice, none was lost
    assert len(set(PassLog.objects.values_list("pid", flat=True))) > 1
