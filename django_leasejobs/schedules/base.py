"""What every part of the schedules package shares (SPEC §7)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

from django.db import router

from django_leasejobs.errors import describe
from django_leasejobs.models import Schedule

__all__ = ["MISSED_MAX", "Problem", "contained", "schedule_db", "zone_of"]

logger = logging.getLogger("django_leasejobs")

#: The most missed due times one drive, resume or settle records for a job (S3).
MISSED_MAX = 1000


def zone_of(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def schedule_db() -> str:
    return router.db_for_write(Schedule)


class Problem(NamedTuple):
    """A schedule that could not be synced, planned or fired (D6): reported, never raised."""

    job: str
    text: str


def contained(job: str, problems: list[Problem], work: Callable[[], Any]) -> Any:
    """Run *work* for one schedule; an error is that schedule's alone (D6, like R9 for runs)."""
    try:
        return work()
    except Exception as exc:  # any error, so its siblings still fire
        text = describe(exc)
        logger.error("Schedule job=%s could not be handled: %s", job, text)
        problems.append(Problem(job, text))
        return None
