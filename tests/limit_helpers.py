"""What the flow-control tests share (SPEC §14): its test jobs, and passes "in flight elsewhere".

A pass in flight in another worker is rows, not a thread: a run whose lease
is begun and unexpired, and a Slot row naming that run and lease (C2).
"""

from __future__ import annotations

from datetime import timedelta

from django_leasejobs import start
from django_leasejobs.ids import new_owner
from django_leasejobs.models import Run, Slot
from tests.models import PassLog
from tests.utils import fresh

SECOND = timedelta(seconds=1)
LIMITED = "tests.limited"  # Limit(concurrency=2), lease 2 s
KEYED = "tests.limited.keyed"  # Limit(concurrency=2, key=payload["account"])
RATED = "tests.rated"  # Limit(rate=Rate(5, per=2 s)): one begin per 0.4 s
QUICK = {"sleep": 0}


def handler(p):
    return p.done()


def hold_slots(job_name, count, *, until, key="", first=0):
    """Simulate *count* passes of *job_name* in flight in other workers.

    Each is a run whose lease is begun and unexpired until *until*, and a
    Slot row (numbers *first*, *first* + 1, ...) naming that run and lease:
    what a pass that took its slot at BEGIN leaves in the database (C2).
    """
    began = until - timedelta(seconds=1)
    holders = []
    for number in range(first, first + count):
        payload = {"account": key, **QUICK} if key else QUICK
        run = start(job_name, payload, instance=f"holder-{key}-{number}").run
        owner = new_owner()
        Run.objects.filter(pk=run.pk).update(
            lease_owner=owner, lease_began_at=began, next_attempt_at=until
        )
        Slot.objects.update_or_create(
            job=job_name, key=key, number=number, defaults={"run_id": run.pk, "owner": owner}
        )
        holders.append(fresh(run))
    return holders


def handler_calls(run):
    return PassLog.objects.filter(run_id=run.pk).count()
