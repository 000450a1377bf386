"""Exceptions raised by django-leasejobs.

Each class's docstring is its default message. Handlers raise :class:`Defer`;
everything else is raised *at* the caller by the library.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured, ValidationError

from .policy import MAX_DELAY


class LeaseJobsError(Exception):
    """A django-leasejobs error. Do not raise directly."""

    def __init__(self, message: str | None = None, *args: Any) -> None:
        super().__init__(message or (self.__doc__ or "").strip(), *args)


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


class NotQueueSafe(LeaseJobsError, ValidationError):
    """A value cannot be stored as a run's payload or cursor (SPEC R2).

    ``path`` names the offending position (``payload.items.3``); ``what`` says
    what was found there. A ``ValidationError`` so forms and APIs can show it.
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


class RetryRefused(LeaseJobsError, ValueError):
    """This run cannot be retried."""


class UnreadableRow(LeaseJobsError):
    """A stored run cannot be read back, so its pass fails as a malformed row (SPEC R9, §12).

    ``run`` holds only what every row can be read for (id, job, counts).
    """

    def __init__(self, run: Any, reason: str) -> None:
        super().__init__(reason)
        self.run = run
        self.reason = reason


class Defer(LeaseJobsError):
    """The upstream said "not now": no attempt is charged (SPEC R8)."""

    def __init__(self, delay: timedelta, reason: str = "") -> None:
        if not isinstance(delay, timedelta) or delay < timedelta(0):
            raise TypeError("Defer(delay) takes a non-negative datetime.timedelta")
        if delay > MAX_DELAY:
            raise ValueError(
                f"Defer(delay) takes at most {MAX_DELAY.days} days (about ten years), got {delay}"
            )
        super().__init__(reason or f"deferred for {delay}")
        self.delay = delay
        self.reason = reason
