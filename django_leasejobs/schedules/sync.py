"""S1: the Schedule rows follow the code -- of the jobs this process registers, and only those.

What to write is decided here; :mod:`.store` writes it.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings

from django_leasejobs import cron
from django_leasejobs.conf import conf
from django_leasejobs.models import Schedule
from django_leasejobs.registry import Job, registry

from . import writes
from .base import Problem, contained, schedule_db, zone_of

__all__ = ["seen_every", "sync_schedules"]

logger = logging.getLogger("django_leasejobs")


def sync_schedules(now: datetime, problems: list[Problem] | None = None) -> list[Schedule]:
    """Create or update the Schedule rows of the jobs registered here (S1).

    A new schedule is due next after *now*: nothing is owed for a definition
    that did not exist. A changed expression or time zone continues from the
    last due time the row fired (``last_due_at``), so two deployments that
    disagree during a rolling deploy lose no due time of either. Only jobs
    registered in this process are touched: a row of another deployment's job
    is left as it is (it reads as ``orphaned`` once no drive has registered it
    for ``ORPHAN_AFTER``), and a job registered here without a schedule any
    more is disabled, never deleted.

    Returns the rows as they stand, for :func:`fire_due_schedules`: one read
    of the table per drive. A row that cannot be synced is reported in
    *problems* and left as it was.
    """
    problems = [] if problems is None else problems
    rows = {row.job: row for row in Schedule.objects.using(schedule_db())}
    stale = False
    for spec in registry:
        row = rows.get(spec.name)
        if spec.schedule:
            stale |= bool(contained(spec.name, problems, partial(_sync, spec, row, now)))
        elif row is not None and row.enabled:
            # Registered here, scheduled no more: this code removed the schedule.
            writes.disable(row)
            logger.warning("Schedule disabled (no longer in the code): %s", spec.name)
            stale = True
    _mark_seen(rows, now)
    return list(Schedule.objects.using(schedule_db())) if stale else list(rows.values())


def _sync(spec: Job, row: Schedule | None, now: datetime) -> bool:
    """Bring one row in line with *spec*; return whether anything was written."""
    assert spec.schedule is not None
    tz_name = spec.timezone or settings.TIME_ZONE
    if row is None:
        writes.create(
            spec.name,
            {
                "expression": spec.schedule,
                "timezone": tz_name,
                "rule": spec.missed,
                "next_due_at": cron.next_due(spec.schedule, zone_of(tz_name), now),
                "last_due_at": now,  # nothing before the row existed is owed
                "seen_at": now,
            },
        )
        return True
    changed = (row.expression, row.timezone) != (spec.schedule, tz_name)
    if not (changed or row.rule != spec.missed or not row.enabled):
        return False
    values: dict[str, Any] = {"rule": spec.missed, "enabled": True}
    # Re-enabling an unchanged definition keeps its next due time, so what
    # passed meanwhile goes through the missed-run rule (S3) rather than
    # vanishing. A changed one continues from the last due time fired.
    if changed:
        values |= {
            "expression": spec.schedule,
            "timezone": tz_name,
            "next_due_at": cron.next_due(spec.schedule, zone_of(tz_name), row.last_due_at or now),
        }
    # Compare-and-set on what was read: a concurrent drive made the same change.
    writes.redefine(row, values)
    return True


def seen_every() -> timedelta:
    """How often a drive refreshes ``seen_at``: enough for ``ORPHAN_AFTER``, at most hourly."""
    return min(timedelta(hours=1), conf.ORPHAN_AFTER / 4)


def _mark_seen(rows: dict[str, Schedule], now: datetime) -> None:
    """S1: note that a drive registers these jobs -- one statement, at most hourly."""
    since = now - seen_every()
    seen = [
        name
        for name, row in rows.items()
        if name in registry
        and registry.get(name).schedule
        and (row.seen_at is None or row.seen_at < since)
    ]
    if seen:
        writes.mark_seen(seen, now)
        for name in seen:
            rows[name].seen_at = now
