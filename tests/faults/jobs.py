"""The fault tests' jobs (§17): passes of a few steps, each step a side effect, logged outside
the database.

Each job runs :func:`walk`: ``passes`` passes of ``steps`` steps; a step sleeps
``step_seconds`` and inserts an :class:`~tests.models.Effect` row; each pass
counts its steps and itself. Every invocation appends ``start <run> <ns> <attempt>``, a
``step <run> <ns>`` as each step body starts to sleep, and
``end <run> <ns> <how>`` (``returned`` or the exception's class, e.g.
``LeaseLost``) to a file of its own process in ``LEASEJOBS_FAULTS_DIR``, on the
machine's monotonic clock: a fault that cuts the database off cannot lose the
evidence of when a pass ran and how it ended (tests/faults/audit.py reads it).
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

from django_leasejobs import Retry, job

#: Short leases, so a fault outlasts them in seconds; retries soon, and many of them.
LEASE = timedelta(seconds=2)
RETRY = Retry(max_attempts=50, base=timedelta(milliseconds=200), cap=timedelta(seconds=1))

WALK = "tests.faults.walk"
#: The same passes, not safe to repeat: a takeover holds the run (L3).
UNSAFE = "tests.faults.unsafe"
#: The same passes, the lease renewed by a heartbeat thread as well (L10).
BEATING = "tests.faults.beating"
#: F5: a lease long enough for step boundaries 200 ms round trips apart ...
STEADY = "tests.faults.steady"
#: ... and one too short for them: its claims cannot leave the BEGIN margin (L4, L5).
BRIEF = "tests.faults.brief"


def _log(line: str) -> None:
    path = os.path.join(os.environ["LEASEJOBS_FAULTS_DIR"], f"{os.getpid()}.log")
    with open(path, "a") as log:
        log.write(line + "\n")


def walk(p):
    """``passes`` passes of ``steps`` steps; each step sleeps, then writes its side effect."""
    from tests.models import Effect

    _log(f"start {p.run.id} {time.monotonic_ns()} {p.attempt}")
    how = "returned"
    try:
        position = p.cursor or 0
        for index in range(p.payload["steps"]):

            def work(name=f"{position}:{index}"):
                _log(f"step {p.run.id} {time.monotonic_ns()}")  # asleep from here, no lock held
                time.sleep(p.payload["step_seconds"])
                Effect.objects.create(run_id=p.run.id, name=name, pid=os.getpid())

            p.step(f"{position}:{index}", work)
            p.count("steps")
        p.count("passes")
        return p.done() if position + 1 >= p.payload["passes"] else p.advance(position + 1)
    except BaseException as exc:
        how = type(exc).__name__
        raise
    finally:
        _log(f"end {p.run.id} {time.monotonic_ns()} {how}")


job(WALK, lease=LEASE, retry=RETRY)(walk)
job(UNSAFE, lease=LEASE, retry=RETRY, safe_to_repeat=False)(walk)
job(BEATING, lease=LEASE, retry=RETRY, heartbeat=True)(walk)
job(STEADY, lease=timedelta(seconds=3), retry=RETRY)(walk)
job(BRIEF, lease=timedelta(milliseconds=200), retry=RETRY)(walk)
