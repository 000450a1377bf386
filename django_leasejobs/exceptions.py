"""Every exception django-leasejobs raises, in one hierarchy under :class:`LeaseJobsError`.

Each class's docstring is its default message. Where a Django or Python
exception means the same thing, the class derives from it too, so existing
handling keeps working: an invalid job is an ``ImproperlyConfigured``, an
unsafe payload a ``ValidationError``, a refused argument a ``ValueError``.

Two exceptions stand outside the hierarchy on purpose: :class:`LeaseLost` and
:class:`PassInterrupted` are ``BaseException`` s, like
``asyncio.CancelledError``, so a handler's ``except Exception`` cannot
swallow them. Some are re-exported where their users import them:
:class:`RedactedError` from ``django_leasejobs.tasks``,
:class:`DrivesExhausted` from ``django_leasejobs.testing``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import OperationalError

from .policy import MAX_DELAY, Retry

if TYPE_CHECKING:
    from .report import DriveReport
    from .states import RunNowRefusal

__all__ = [
    "BackoffFailed",
    "DatabaseFull",
    "DecodeFailed",
    "Defer",
    "DrivesExhausted",
    "DuplicateJob",
    "InvalidJob",
    "InvalidKey",
    "InvalidNote",
    "InvalidSchedule",
    "JobNotRegistered",
    "LeaseJobsError",
    "LeaseLost",
    "NotQueueSafe",
    "PassAbandoned",
    "PassInterrupted",
    "PassTimedOut",
    "RedactedError",
    "RetryRefused",
    "RunCancelled",
    "RunNowRefused",
    "StartContended",
    "StepFailed",
    "StepInTransaction",
    "StepReused",
    "TaskGone",
    "UnreadableRow",
]


class LeaseJobsError(Exception):
    """A django-leasejobs error. Do not raise directly."""

    def __init__(self, message: str | None = None, *args: Any) -> None:
        default = (self.__doc__ or "").strip().split("\n", 1)[0]
        super().__init__(message or default, *args)


# -- definitions and arguments, refused before anything is written -------------------------


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


# -- operators' refusals --------------------------------------------------------------------


class RetryRefused(LeaseJobsError, ValueError):
    """This run cannot be retried."""


class RunNowRefused(LeaseJobsError):
    """Run now was refused: ``reason`` says why, ``retry_at`` when a place frees up (S5)."""

    def __init__(self, reason: RunNowRefusal, message: str, retry_at: datetime | None = None):
        super().__init__(message)
        self.reason = reason
        self.retry_at = retry_at


# -- what a handler raises, or meets ------------------------------------------------------


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


class StepReused(LeaseJobsError):
    """A step name was used twice in one pass (SPEC R6).

    The second call would silently return the first one's stored result
    instead of doing its own work, so it is refused outright.
    """

    def __init__(self, name: str) -> None:
        super().__init__(
            f"step {name!r} was already used in this pass; a step name identifies one unit "
            "of work, so give each step its own name (derive it from the cursor or an id)"
        )
        self.name = name


class StepInTransaction(LeaseJobsError):
    """A step was called inside a transaction the handler opened (SPEC R5).

    Its record would be written inside that transaction, and a rollback would
    erase it: the step would run again. Open the transaction inside the
    step's function instead.
    """

    def __init__(self, name: str) -> None:
        super().__init__(
            f"step {name!r} was called inside a transaction the handler opened; its record "
            "would be rolled back with that transaction and the step would run again. Open "
            "the transaction inside the step: p.step(name, lambda: atomic_work())"
        )
        self.name = name


class StepFailed(LeaseJobsError):
    """A step raised, or its attempts were already spent (SPEC R5, R7)."""

    def __init__(self, name: str, attempts: int, policy: Retry, error: str) -> None:
        super().__init__(error or f"step {name!r} failed")
        self.name = name
        self.attempts = attempts
        self.policy = policy
        self.error = error or f"step {name!r} failed"


class PassTimedOut(LeaseJobsError):
    """The pass ran past its job's ``timeout`` (SPEC R10); it will not commit."""


class DecodeFailed(LeaseJobsError):
    """A stored JSON column of the run (or a step result) does not parse (SPEC R9)."""


class UnreadableRow(LeaseJobsError):
    """A stored run cannot be read back, so its pass fails as a malformed row (SPEC R9, §12).

    ``run`` holds only what every row can be read for (id, job, counts).
    """

    def __init__(self, run: Any, reason: str) -> None:
        super().__init__(reason)
        self.run = run
        self.reason = reason


class PassAbandoned(LeaseJobsError):
    """The pass stopped without an outcome -- its worker died or lost its lease -- and
    the run was taken over (SPEC L3).

    Never raised: it names that attempt's error in a Django task's result (§9).
    """


class RunCancelled(LeaseJobsError):
    """An operator cancelled the run (SPEC §3 ``cancel``).

    Never raised: it names the error of a cancelled Django task's result (§9).
    """


class InvalidSchedule(LeaseJobsError, ValueError):
    """A stored schedule this process cannot plan: its expression or time zone (D6)."""


# -- a Django task's run (SPEC §9), and a test's drives ----------------------------------------


class TaskGone(LeaseJobsError, LookupError):
    """A run's task path no longer imports, or no longer names a task."""


class BackoffFailed(LeaseJobsError):
    """A task's ``backoff`` raised, or answered what is not a delay: its run fails at once."""


class RedactedError(LeaseJobsError):
    """A task's exception as its run's ``last_error`` describes it, for the log (SPEC §10)."""


class DrivesExhausted(LeaseJobsError):
    """Runs were still due after the most drives allowed: a job that never finishes?"""

    def __init__(self, drives: int, report: DriveReport) -> None:
        super().__init__(
            f"runs were still due after {drives} drives (a job that never finishes, or one "
            f"started again by its own handler?); so far: {report.summary()}"
        )
        self.report = report


class LeaseLost(BaseException):
    """This pass no longer holds its run (SPEC L6): it stops, writing nothing.

    A ``BaseException``, so a handler's ``except Exception`` does not swallow
    it; and even if a handler catches it, the pass has already recorded the
    loss and its outcome is ``superseded``.
    """


class PassInterrupted(BaseException):
    """The worker is shutting down and its stop timeout passed: stop at this step boundary.

    The pass is released, not failed: no attempt is charged, the steps it
    recorded stay in the ledger, and the run is due again at once.
    """
