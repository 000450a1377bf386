"""Runs the browser tests seed the admin with: a site's runs as an operator finds them.

Each is a row as the store would have left it (``tests.factories``), timed back
from *now*, so that the run list and the run page read as they would on an
ordinary day, and the screenshots of docs/operators.md show the same runs.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django_leasejobs.models import Run
from tests.factories import RunFactory


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


def held_invoice_run() -> Run:
    """An invoice run interrupted after invoice 1042 (41 sent): held, for an operator."""
    return RunFactory(
        job="tests.fragile",
        instance="invoices:2026-03",
        status="held",
        failure_code="interrupted",
        attempts=1,
        cursor='{"invoice": 1042}',
        counters='{"sent": 41}',
    )
