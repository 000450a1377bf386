"""Exceptions raised by django-leasejobs.

Each class's docstring is its default message. Handlers raise :class:`Defer`;
everything else is raised *at* the caller by the library.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured, ValidationError


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

    def __init__(self, path: str, what: str) -> None:
        message = (
            f"{path} is {what}: a run's payload and cursor hold JSON values only "
            "(dict with str keys, list, str, int, finite float, bool, None)"
        )
        ValidationError.__init__(self, message, code="not_queue_safe", params={"path": path})
        self.path = path
        self.what = what

    def __str__(self) -> str:
        return str(self.message)


class Defer(LeaseJobsError):
    """The upstream said "not now": no attempt is charged (SPEC R8)."""

    def __init__(self, delay: timedelta, reason: str = "") -> None:
        if not isinstance(delay, timedelta) or delay < timedelta(0):
            raise TypeError("Defer(delay) takes a non-negative datetime.timedelta")
        super().__init__(reason or f"deferred for {delay}")
        self.delay = delay
        self.reason = reason
