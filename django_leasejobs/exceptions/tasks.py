"""What the Django task backend (SPEC §9) and the test helpers raise.

Errors of the code around the runs -- a task path that no longer imports, a
``backoff`` that failed, a test's drives that never ran dry -- rather than of
a pass's own protocol.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import LeaseJobsError

if TYPE_CHECKING:
    from django_leasejobs.report import DriveReport

__all__ = ["BackoffFailed", "DrivesExhausted", "RedactedError", "TaskGone"]


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
