"""The books of what a drive's runs came to, in its report (D4, O1, C4).

Two values go along a drive's snapshot: the :class:`~.cursor.DueCursor`,
how far along it is, and the :class:`Bookkeeper`, what its runs came to.
The cursor reads the books -- a drive stops at its limit of runs attempted,
or when it was aborted -- and the books never read the cursor.
"""

from __future__ import annotations

import logging

from .due import DueKey
from .errors import describe, one_line
from .outcome import Outcome
from .pacing import pace
from .report import DriveReport, Note
from .states import PassOutcome
from .stats import aggregate

__all__ = ["Bookkeeper"]

logger = logging.getLogger("django_leasejobs")


class Bookkeeper:
    """What a drive's runs came to, counted in its report as each ends (D4, O1)."""

    def __init__(self, report: DriveReport) -> None:
        self.report = report

    def failed(self, key: DueKey, exc: BaseException, lost: bool) -> None:
        """A database error on *key*'s run: that run only, or the drive if it is an outage."""
        self.report.errors.append(Note(key.id, describe(exc)))
        if lost:
            # The pass in flight is abandoned (its lease will expire) and
            # the rest of the drive waits for the next.
            self.report.aborted = one_line(exc)
            logger.error("Drive aborted: database error on run id=%s (%s)", key.id, type(exc))

    def broke(self, key: DueKey, exc: BaseException) -> None:
        """Anything else that went wrong driving *key*'s run: that run only (R9)."""
        logger.error("Run id=%s could not be driven", key.id, exc_info=exc)
        self.report.errors.append(Note(key.id, describe(exc)))

    def count(self, key: DueKey, outcomes: list[Outcome], seconds: float | None) -> None:
        """Count one run's passes; a throttled one ran nothing, so it is not ``attempted`` (C4)."""
        if outcomes and outcomes[0].status != PassOutcome.THROTTLED and seconds is not None:
            pace.observe(key.job, seconds)
        self.report.attempted += any(
            outcome.status != PassOutcome.THROTTLED for outcome in outcomes
        )
        for outcome in outcomes:
            self.report.tally(key.id, outcome)
            # Known by its task's path for a task run (§9): the name its pass named.
            known = outcome.job or key.job
            aggregate.observe(known, outcome.queue, outcome.status, outcome.seconds)
