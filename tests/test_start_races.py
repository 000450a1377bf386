"""R1 under real concurrency: separate processes, separate connections, one barrier.

Each process starts the same instances in the same order, so every instance is
a race of all the processes at once. A read-then-insert start() fails here:
several processes see no live run and each inserts one.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from django.db import connection

from django_leasejobs import start
from django_leasejobs.models import Run
from tests.processes import run_together

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]


def _processes() -> int:
    # SQLite serialises writers through one file lock; 4 processes prove the
    # point there (the number). Client/server databases get 16.
    return 4 if connection.vendor == "sqlite" else 16


def test_r1_concurrent_starts_make_exactly_one_live_run():
    processes = _processes()
    instances = [f"race-{n}" for n in range(20)]
    results = run_together(
        "tests.processes.start_each", processes, "tests.walk", instances, {"n": 1}, False
    )
    by_instance = defaultdict(list)
    for outcomes in results:
        for instance, run_id, joined in outcomes:
            by_instance[instance].append((run_id, joined))
    assert sorted(by_instance) == sorted(instances)
    for instance, seen in by_instance.items():
        assert len(seen) == processes
        assert len({run_id for run_id, _joined in seen}) == 1, (instance, seen)
        assert sorted(joined for _run_id, joined in seen) == [False] + [True] * (processes - 1)
    assert Run.objects.count() == len(instances)
    assert Run.objects.live().count() == len(instances)


def test_r1_concurrent_start_many_batches_make_exactly_one_live_run_per_instance():
    # Each process's batch holds every instance, in an order of its own; some
    # are live already. Each instance: one run, started once, joined by the rest.
    processes = _processes()
    instances = [f"batch-{n}" for n in range(60)]
    already = {
        instance: start("tests.walk", instance=instance).run.pk for instance in instances[:10]
    }
    results = run_together("tests.processes.start_batch", processes, "tests.walk", instances)
    by_instance = defaultdict(list)
    for outcomes in results:
        assert len(outcomes) == len(instances)
        for instance, run_id, joined in outcomes:
            by_instance[instance].append((run_id, joined))
    for instance, seen in by_instance.items():
        assert len({run_id for run_id, _joined in seen}) == 1, (instance, seen)
        starters = [joined for _run_id, joined in seen].count(False)
        assert starters == (0 if instance in already else 1), (instance, seen)
        if instance in already:
            assert seen[0][0] == already[instance]
    assert Run.objects.count() == len(instances)
    assert Run.objects.live().count() == len(instances)


def test_r1_concurrent_kicks_set_the_follow_up_flag_once():
    live = start("tests.walk", {"v": "first"}, instance="kick").run
    processes = _processes()
    results = run_together(
        "tests.processes.start_each", processes, "tests.walk", ["kick"] * 5, {"v": "later"}, True
    )
    outcomes = [outcome for per_process in results for outcome in per_process]
    assert len(outcomes) == processes * 5
    assert all(joined for _instance, _run_id, joined in outcomes)
    assert {run_id for _instance, run_id, _joined in outcomes} == {live.pk}
    assert Run.objects.count() == 1
    live.refresh_from_db()
    assert live.rerun_requested is True
    assert live.rerun_payload == '{"v":"later"}'
    assert live.payload == '{"v":"first"}'
