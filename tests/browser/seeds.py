"""Runs the browser tests seed the admin with: a site's runs as an operator finds them.

Each is a row as the store would have left it (``tests.factories``), timed back
from *now*, so that the run list and the run page read as they would on an
ordinary day, and the screenshots of docs/operators.md show the same runs.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from django_leasejobs.models import Run
from tests.factories import RunFactory, StepFactory


def last_nights_run(now: datetime, **columns) -> Run:
    """The nightly job's run of last night: done in 3 m 12 s, nine hours ago."""
    return RunFactory(
        job="tests.nightly",
        instance="default",
        status="done",
        counters='{"rows": 1204}',
        started_at=now - timedelta(hours=9),
        ended_at=now - timedelta(hours=9) + timedelta(minutes=3, seconds=12),
        **columns,
    )


def cancelled_cleanup(now: datetime, by: str = "alice", hours_ago: int = 2) -> Run:
    """A clean-up run *by* cancelled *hours_ago* hours ago, an hour after it started."""
    return RunFactory(
        job="tests.noop",
        instance="cleanup",
        status="cancelled",
        failure_code="cancelled",
        last_error=f"cancelled by {by}",
        started_at=now - timedelta(hours=hours_ago + 1),
        ended_at=now - timedelta(hours=hours_ago),
    )


def import_in_a_pass(now: datetime, instance: str) -> Run:
    """A contacts import on page 31 of 50, a worker's pass on it now (leased 20 s ago)."""
    return RunFactory(
        job="tests.walk",
        instance=instance,
        cursor='{"page": 31}',
        counters='{"imported": 3100}',
        progress_total=5000,
        started_at=now - timedelta(minutes=12),
        lease_owner="01JQ0LEASEOWNER00000000000",
        lease_holder="worker-2:4182:1767225600",
        lease_began_at=now - timedelta(seconds=20),
        next_attempt_at=now + timedelta(minutes=4),
    )


def held_invoice_run(now: datetime | None = None) -> Run:
    """An invoice run interrupted inside invoice 1042's charge (41 sent): held, for an operator.

    Its ledger is as a job not safe to repeat leaves it when its worker dies
    mid-step (A8): ``reserve:1042`` recorded, ``charge:1042`` begun four
    minutes ago and never recorded -- the step that may have half-happened.
    """
    now = now or timezone.now()
    run = RunFactory(
        job="tests.fragile",
        instance="invoices:2026-03",
        status="held",
        failure_code="interrupted",
        attempts=1,
        cursor='{"invoice": 1042}',
        counters='{"sent": 41}',
        last_error=(
            "the pass holding this run began and stopped reporting (worker killed or cut off); "
            "its lease expired and the run was taken over"
        ),
        started_at=now - timedelta(minutes=35),
        updated_at=now - timedelta(minutes=2),
    )
    began = now - timedelta(minutes=4)
    StepFactory(run=run, name="reserve:1042", result='{"reserved": 1}', recorded_at=began)
    StepFactory(run=run, name="charge:1042", result=None, attempts=0, began_at=began)
    return run


def failed_import(now: datetime | None = None, **columns) -> Run:
    """A contacts import that gave up on page 7 of 20 after three failed passes."""
    now = now or timezone.now()
    return RunFactory(
        **{
            "job": "tests.walk",
            "instance": "contacts:us",
            "status": "failed",
            "payload": '{"source": "crm", "since": "2026-01-01"}',
            "cursor": '{"page": 7}',
            "counters": '{"imported": 700, "skipped": 3}',
            "progress_total": 2000,
            "attempts": 3,
            "failure_code": "handler_failed",
            "last_error": (
                "ConnectionError: crm.example.com answered 503 Service Unavailable\n"
                "Traceback (most recent call last):\n"
                '  File "imports/contacts.py", line 88, in fetch_page\n'
                "    raise ConnectionError(...)"
            ),
            "started_at": now - timedelta(minutes=40),
            "ended_at": now - timedelta(minutes=2),
            **columns,
        }
    )
