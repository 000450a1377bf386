"""The library's own log lines for its signals, connected in ``ready()``.

As Django's ``django.tasks`` does: an outcome is logged by a receiver, at the
level its meaning deserves -- ERROR only for a run that failed or waits for
an operator. Ids and codes only: never a payload (§10).
"""

from __future__ import annotations

import logging
from typing import Any

from django.dispatch import receiver

from .signals import job_overdue, run_completed, run_failed, run_held, schedule_missed

logger = logging.getLogger("django_leasejobs")


@receiver(run_completed, dispatch_uid="django_leasejobs.log_run_completed")
def log_run_completed(sender: type, run: Any, **kwargs: Any) -> None:
    logger.info("Run completed id=%s job=%s", run.pk, run.job)


@receiver(run_failed, dispatch_uid="django_leasejobs.log_run_failed")
def log_run_failed(sender: type, run: Any, failure_code: str, **kwargs: Any) -> None:
    logger.error(
        "Run failed id=%s job=%s attempts=%s code=%s", run.pk, run.job, run.attempts, failure_code
    )


@receiver(run_held, dispatch_uid="django_leasejobs.log_run_held")
def log_run_held(sender: type, run: Any, **kwargs: Any) -> None:
    logger.error("Run held id=%s job=%s code=interrupted", run.pk, run.job)


@receiver(schedule_missed, dispatch_uid="django_leasejobs.log_schedule_missed")
def log_schedule_missed(
    sender: type, schedule: Any, due_times: list[Any], cause: str, dropped: int, **kwargs: Any
) -> None:
    logger.info(
        "Schedule missed job=%s cause=%s rule=%s recorded=%s older=%s",
        schedule.job,
        cause,
        schedule.rule,
        len(due_times),
        dropped,
    )


@receiver(job_overdue, dispatch_uid="django_leasejobs.log_job_overdue")
def log_job_overdue(sender: type, schedule: Any, state: str, **kwargs: Any) -> None:
    logger.warning("Job overdue job=%s state=%s", schedule.job, state)
