"""F2: the network between a worker and the database drops every packet, silently.

A victim worker reaches the database through a :class:`FaultProxy`; while each
of its threads has a pass asleep in a step body, the proxy turns into a black
hole (no byte, no ACK, no reset, both ways). A second worker, on a direct
connection, takes the runs over once their leases expire. The victim, given
the connection options the deployment guide names (docs/howto/deploy.md,
"A worker cut off from the database"), notices within their bound, abandons
its passes and -- once the network heals -- drives again, without changing
any run the other worker held. PostgreSQL and MariaDB; ``--concurrency`` 1 and 4.
"""

from __future__ import annotations

import json
import time

import pytest
from django.db import connection

from django_leasejobs import start
from django_leasejobs.models import Run
from tests.faults import audit
from tests.faults.fleet import Fleet, when_asleep
from tests.faults.jobs import WALK
from tests.faults.proxy import FaultProxy
from tests.utils import on_a_server_only, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.faults, on_a_server_only]

PASSES, STEPS, STEP_SECONDS = 2, 3, 0.5
PAYLOAD = {"passes": PASSES, "steps": STEPS, "step_seconds": STEP_SECONDS}

#: The deployment guide's options, scaled down for a test: what bounds how long a worker
#: waits on a dead socket. PostgreSQL (libpq): keepalive probes on an idle connection, and
#: TCP_USER_TIMEOUT on data sent and never acknowledged, in ms. MariaDB (Connector/C): the
#: longest wait for a reply, or for a write to go out, in s. Both: a connection attempt.
CUT_OFF_OPTIONS = {
    "postgresql": {
        "connect_timeout": 3,
        "keepalives": 1,
        "keepalives_idle": 2,
        "keepalives_interval": 1,
        "keepalives_count": 2,
        "tcp_user_timeout": 4000,
    },
    "mysql": {"connect_timeout": 3, "read_timeout": 4, "write_timeout": 4},
}
#: Well past the options' bound (about 4 s): a worker without them waits ~15 minutes.
NOTICED_WITHIN = 45


@pytest.mark.parametrize("concurrency", [1, 4])
def test_f2_a_cut_off_worker_gives_up_its_passes_and_drives_again_once_healed(
    tmp_path, concurrency
):
    """F2: others take the runs over; the cut-off worker abandons its passes within the
    bound its connection options give; healed, it drives again and changed no run."""
    runs = [start(WALK, PAYLOAD, instance=f"f2-{n}").run.pk for n in range(concurrency)]
    options = json.dumps(CUT_OFF_OPTIONS[connection.vendor])
    fleet = Fleet(tmp_path, [WALK], concurrency)
    with FaultProxy(connection.vendor) as proxy:
        try:
            victim = fleet.start(proxy.port, {"LEASEJOBS_TEST_DB_OPTIONS": options})
            when_asleep(victim, runs, tmp_path)
            proxy.blackhole()
            cut = time.monotonic_ns()
            victim.faults.append(cut)
            cut_off = audit.open_at(tmp_path, victim.pid, cut)
            assert sorted(one.run_id for one in cut_off) == sorted(runs)
            rescuer = fleet.start()  # straight to the database

            def abandoned() -> list[audit.Invocation]:
                now = audit.invocations(tmp_path)
                ended = [
                    one for one in now if one.pid == victim.pid and one.start < cut and one.end
                ]
                return ended if len(ended) == len(cut_off) else []

            gave_up = wait_for(
                abandoned, "the cut-off worker to give up its passes", NOTICED_WITHIN
            )
            noticed = max(one.end for one in gave_up) - cut
            assert audit.settled(runs, 60), audit.statuses(runs)

            proxy.heal()
            fleet.workers.remove(rescuer)
            rescuer.process.terminate()
            rescuer.process.wait(60)
            fresh = [
                start(WALK, {**PAYLOAD, "passes": 1}, instance=f"f2-after-{n}").run.pk
                for n in range(concurrency)
            ]
            assert audit.settled(fresh, 60), (audit.statuses(fresh), victim.log())
            drivers = {one.pid for one in audit.invocations(tmp_path) if one.run_id in fresh}
            assert drivers == {victim.pid}
        finally:
            fleet.stop()

    print(
        f"\nF2 on {connection.vendor}, --concurrency {concurrency}: cut-off passes abandoned "
        f"{noticed / 1e9:.1f} s after the network went dead; connections through the proxy: "
        f"{proxy.connections}"
    )
    assert {one.how for one in gave_up} <= {"OperationalError", "InterfaceError"}, gave_up
    assert audit.assert_no_run_lost(runs + fresh) == {"done": len(runs) + len(fresh)}
    audit.assert_never_two_at_once(audit.intervals(tmp_path, fleet.faults()))
    audit.assert_only_committed_writes(runs, PASSES, STEPS)
    audit.assert_only_committed_writes(fresh, 1, STEPS)
    done = list(Run.objects.filter(pk__in=runs).values_list("pk", flat=True))
    audit.assert_side_effects(done, PASSES, STEPS, {victim.pid}, len(cut_off))
