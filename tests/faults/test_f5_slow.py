"""F5: every round trip to the database delayed 200 ± 50 ms for a while.

Two workers reach the database through a :class:`FaultProxy` that holds every
chunk 100 ± 25 ms each way. Runs of a job whose lease (3 s) outlasts the time
between its step boundaries (1 to 1.5 s) keep their leases, though each pass
outlasts it -- and the other worker has threads to spare, that would take any
lease that ran out over: no takeover, no attempt
charged, no pass superseded. Runs of a job whose lease (200 ms) the delay eats
before BEGIN are admission misses (L5): nothing charged, never failed, never
lost -- and done once the delay ends. Then throughput returns: a batch of
runs started after the delay is driven to the end. PostgreSQL and MariaDB;
``--concurrency`` 1 and 4.
"""

from __future__ import annotations

import time

import pytest
from django.db import connection

from django_leasejobs import start
from django_leasejobs.models import Run
from tests.faults import audit
from tests.faults.fleet import Fleet
from tests.faults.jobs import BRIEF, STEADY, WALK
from tests.faults.proxy import FaultProxy
from tests.utils import on_a_server_only, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.faults, on_a_server_only]

#: A steady pass lasts longer than its 3 s lease under the delay: it lives on its renewals (L7).
PASSES, STEPS, STEP_SECONDS = 1, 8, 0.5
PAYLOAD = {"passes": PASSES, "steps": STEPS, "step_seconds": STEP_SECONDS}
QUICK = {"passes": 1, "steps": 1, "step_seconds": 0}
#: Each way, each chunk: a round trip is delayed 200 ± 50 ms.
DELAY, JITTER = 0.1, 0.025
AFTER = 20  # runs started once the delay is over


def done(run_ids: list[str]) -> int:
    return Run.objects.filter(pk__in=run_ids, status="done").count()


@pytest.mark.parametrize("concurrency", [1, 4])
def test_f5_a_slow_database_costs_time_never_a_lease_or_a_run(tmp_path, concurrency):
    """F5, L5, L7: boundaries within the lease keep it; a lease too short is an admission
    miss, never a failed or lost run; throughput returns when the delay ends."""
    fleet = Fleet(tmp_path, [STEADY, BRIEF, WALK], concurrency)
    with FaultProxy(connection.vendor) as proxy:
        try:
            workers = [fleet.start(proxy.port) for _ in range(2)]
            proxy.delay(DELAY, JITTER)
            slowed = time.monotonic()
            steady = [start(STEADY, PAYLOAD, instance=f"f5-{n}").run.pk for n in range(concurrency)]
            brief = [
                start(BRIEF, QUICK, instance=f"f5-brief-{n}").run.pk for n in range(concurrency)
            ]
            # Every brief run missed its admission at least once, and none began meanwhile.
            wait_for(
                lambda: (
                    Run.objects.filter(pk__in=brief, admission_misses__gte=1).count() == len(brief)
                ),
                "an admission miss of each brief run",
                120,
            )
            assert not [one for one in audit.invocations(tmp_path) if one.run_id in brief]
            assert audit.settled(steady, 180), audit.statuses(steady)
            during = len(steady) * PASSES * STEPS / (time.monotonic() - slowed)

            proxy.heal()
            healed = time.monotonic()
            after = [start(WALK, QUICK, instance=f"f5-after-{n}").run.pk for n in range(AFTER)]
            assert audit.settled(brief + after, 120), audit.statuses(brief + after)
            after_rate = AFTER / (time.monotonic() - healed)
        finally:
            fleet.stop()

    print(
        f"\nF5 on {connection.vendor}, --concurrency {concurrency}: {during:.2f} steps/s with "
        f"the delay, {after_rate:.1f} runs/s after it"
    )
    assert audit.assert_no_run_lost(steady + brief + after) == {"done": len(steady + brief + after)}
    passes = audit.invocations(tmp_path)
    # No pass of the steady job lost its lease: none superseded, none taken over (charged).
    steady_passes = [one for one in passes if one.run_id in steady]
    assert len(steady_passes) == len(steady) * PASSES
    assert {(one.how, one.attempt) for one in steady_passes} == {("returned", 1)}
    # The brief job's misses charged nothing: each ran once, as its first attempt.
    brief_passes = [one for one in passes if one.run_id in brief]
    assert sorted((one.run_id, one.how, one.attempt) for one in brief_passes) == sorted(
        (run_id, "returned", 1) for run_id in brief
    )
    logs = "".join(worker.log() for worker in workers)
    assert "Admission miss" in logs
    audit.assert_never_two_at_once(audit.intervals(tmp_path, {}))
    audit.assert_only_committed_writes(steady, PASSES, STEPS)
    audit.assert_only_committed_writes(brief + after, 1, 1)
    audit.assert_side_effects(steady, PASSES, STEPS, set(), 0)
