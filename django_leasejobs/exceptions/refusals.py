"""What is refused before it is written: a definition, an argument, a start, an operator's verb.

Raised to the code that asked -- a job's import, a ``start()``, a
``p.step()`` name, an admin action, a schedule read for planning -- before
anything it asked for is written, so the caller can correct the request and
ask again. Apart from :mod:`.passes`, whose exceptions are about the course
of a pass: each of these is the answer to one call.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import OperationalError

from .base import LeaseJobsError

if TYPE_CHECKING:
    from django_leasejobs.states import RunNowRefusal

__all__ = [
    "DatabaseFull",
    "DuplicateJob",
    "InvalidJob",
    "InvalidKey",
    "InvalidNote",
    "InvalidSchedule",
    "JobNotRegistered",
    "NotQueueSafe",
    "RetryRefused",
    "RunNowRefused",
    "StartContended",
]

# -- definitions and arguments ---------------------------------------------------------------


class JobNotRegistered(LeaseJobsError, LookupError):
    """No job is registered under this name."""

    def __init__(self, name: str, registered: list[str]) -> None:
        listing = ", ".join(sorted(registered)) or "none"
        super().__init__(f"No job named {name!r} is registered here. Registered jobs: {listing}.")
        self.name = name
        self.registered = sorted(registered)


class InvalidJob(LeaseJobsError, ImproperlyConfigured):
    """A job's definition is invalid."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"Job {name!r}: {problem}")
        self.name = name
        self.problem = problem


class DuplicateJob(InvalidJob):
    """Two jobs were registered under one name."""


class NotQueueSafe(LeaseJobsError, ValidationError, TypeError):
    """A value cannot be stored as a run's payload or cursor (SPEC R2).

    ``path`` names the offending position (``payload.items.3``); ``what`` says
    what was found there. A ``ValidationError`` so forms and APIs can show it,
    and a ``TypeError``, as Django's own task backends raise for a task
    argument JSON cannot carry (SPEC §9).
    """

    def __init__(self, path: str, what: str, why: str | None = None) -> None:
        why = why or (
            "a run's payload and cursor hold JSON values only "
            "(dict with str keys, list, str, int, finite float, bool, None)"
        )
        shown = path if len(path) <= 120 else f"{path[:60]}…{path[-40:]}"
        message = f"{shown} is {what}: {why}"
        ValidationError.__init__(self, message, code="not_queue_safe", params={"path": path})
        self.path = path
        self.what = what

    def __str__(self) -> str:
        return str(self.message)


class InvalidKey(LeaseJobsError, ValueError):
    """An instance, step name or limit key no backend can store and compare as a key."""

    def __init__(self, name: str, value: object, problem: str) -> None:
        # ``...``: no value to show (a key function that raised returned none).
        super().__init__(f"{name} {problem}" if value is ... else f"{name} {value!r} {problem}")
        self.name = name
        self.value = value


class InvalidNote(LeaseJobsError, ValueError):
    """An operator's note is too long."""


class StartContended(LeaseJobsError):
    """A start neither inserted a run nor joined the live one: its key kept changing hands."""


class DatabaseFull(LeaseJobsError, OperationalError):
    """The database is full: it could not grow to store the new run, and nothing was written.

    F8: SQLite at its ``max_page_count`` or out of disk, a MariaDB table full,
    a PostgreSQL tablespace out of space. Raised by ``start()``,
    ``start_many()`` and every other way a run begins, with the job named; the
    driver's own message (which can quote a file path) stays on
    ``__cause__``, never in the message. An ``OperationalError``, as the
    driver's error was, so existing ``except DatabaseError`` handling holds.
    """

    def __init__(self, job: str) -> None:
        super().__init__(
            f"Could not start a run of {job!r}: the database is full (it cannot grow to "
            "store the run); nothing was written. Free space, or raise the database's "
            "limit, and start it again."
        )
        self.job = job


class InvalidSchedule(LeaseJobsError, ValueError):
    """A stored schedule this process cannot plan: its expression or time zone (D6)."""


# -- operators' refusals --------------------------------------------------------------------


class RetryRefused(LeaseJobsError, ValueError):
    """This run cannot be retried."""


class RunNowRefused(LeaseJobsError):
    """Run now was refused: ``reason`` says why, ``retry_at`` when a place frees up (S5)."""

    def __init__(self, reason: RunNowRefusal, message: str, retry_at: datetime | None = None):
        super().__init__(message)
        self.reason = reason
        self.retry_at = retry_at
