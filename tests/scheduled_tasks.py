"""Scheduled tasks (SPEC §9 revision 4, §7): ``@task(schedule=...)`` on this backend.

Imported by tests/test_tasks_schedules.py (its ``scheduled`` fixture, which
unregisters them after each test) and, through ``OPTIONS["SCHEDULED_TASKS"]``,
by the worker processes that test starts. Django 6.0's ``@task`` forwards no
keywords to the backend's task class, so there are none there.
"""

from __future__ import annotations

import os
from typing import Any

from django_leasejobs.compat import task
from tests.tasks import PER_TASK_OPTIONS

#: What the in-process runs saw: (task name, run id, attempt).
CALLS: list[tuple[str, str, int]] = []

if PER_TASK_OPTIONS:

    @task(schedule="0 * * * *", timezone="UTC", takes_context=True)
    def hourly_report(context: Any) -> str:
        """Hourly, catching up once after an outage (the default rule)."""
        CALLS.append(("hourly_report", context.task_result.id, context.attempt))
        return "reported"

    @task(schedule="0 * * * *", timezone="UTC", missed="skip")
    def hourly_skip() -> None:
        CALLS.append(("hourly_skip", "", 0))

    @task(schedule="0 * * * *", timezone="UTC", missed="required", takes_context=True)
    def hourly_required(context: Any) -> None:
        CALLS.append(("hourly_required", context.task_result.id, context.attempt))

    @task(schedule="0 * * * *", timezone="UTC", safe_to_repeat=False)
    def hourly_fragile() -> None:
        """Not safe to repeat: run now refuses it (S5)."""

    @task(schedule="0 * * * *", timezone="UTC", max_attempts=2, backoff=lambda exc, r: 60)
    def hourly_flaky() -> None:
        """Fails: retried once, a minute later, then failed (the task's own options)."""
        raise ConnectionError("the vendor is down")

    @task(schedule="* * * * * */2", timezone="UTC", takes_context=True)
    def every_two_seconds(context: Any, label: str = "tick") -> None:
        """Every 2 s (croniter's sixth field): one Effect row per call, by the worker's pid."""
        from tests.models import Effect

        Effect.objects.create(run_id=context.task_result.id, name=label, pid=os.getpid())
