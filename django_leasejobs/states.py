"""The vocabularies stored in status and failure columns (SPEC §2, §10).

Pure data: no ORM, so every other module can import it.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

__all__ = ["FAILURE_MEANINGS", "LIVE_STATUSES", "FailureCode", "RunOrigin", "RunStatus"]


class RunStatus(models.TextChoices):
    RUNNING = "running", _("Running")
    DONE = "done", _("Done")
    FAILED = "failed", _("Failed")
    CANCELLED = "cancelled", _("Cancelled")
    HELD = "held", _("Held")


#: Statuses that hold the coalescing key (SPEC R1): one such run per (job, instance).
LIVE_STATUSES = frozenset({RunStatus.RUNNING, RunStatus.HELD})


class RunOrigin(models.TextChoices):
    """How a run began (SPEC §2): the hand-run cap (S5) counts ``hand``."""

    API = "api", _("start()")
    SCHEDULE = "schedule", _("Schedule")
    HAND = "hand", _("Run now (by hand)")
    RETRY = "retry", _("Retry of an earlier run")
    FOLLOW_UP = "follow_up", _("Follow-up of a kicked run")
    TASK = "task", _("Django task")


class FailureCode(models.TextChoices):
    """Why a run failed or is held: a fixed vocabulary (SPEC §10)."""

    HANDLER_FAILED = "handler_failed", _("Handler failed")
    STEP_EXHAUSTED = "step_exhausted", _("Step exhausted")
    TIMEOUT = "timeout", _("Timeout")
    LEASE_EXPIRED = "lease_expired", _("Lease expired")
    INTERRUPTED = "interrupted", _("Interrupted")
    LEASE_TOO_SHORT = "lease_too_short", _("Lease too short")
    DECODE_FAILED = "decode_failed", _("Decode failed")
    CANCELLED = "cancelled", _("Cancelled")

    @property
    def meaning(self) -> str:
        """The one-line explanation operators read next to the code."""
        return str(FAILURE_MEANINGS[self])


#: Kept apart from the choices so rewording an explanation needs no migration.
FAILURE_MEANINGS = {
    FailureCode.HANDLER_FAILED: _("The job's handler raised an exception; see the last error."),
    FailureCode.STEP_EXHAUSTED: _("A step failed as many times as its retry policy allows."),
    FailureCode.TIMEOUT: _("A pass ran longer than the job's timeout and was not committed."),
    FailureCode.LEASE_EXPIRED: _(
        "A worker began a pass and stopped reporting (killed or cut off); its lease "
        "expired and another worker took the run over."
    ),
    FailureCode.INTERRUPTED: _(
        "A pass of a job that is not safe to repeat was interrupted. Nothing runs until an "
        "operator releases the run (resume or fail)."
    ),
    FailureCode.LEASE_TOO_SHORT: _(
        "Ten claims in a row could not begin before a quarter of the lease was gone: the "
        "job's lease is too short for this environment."
    ),
    FailureCode.DECODE_FAILED: _(
        "The run's stored row cannot be decoded: its payload, cursor or counters are not "
        "valid JSON, or the database cannot read a column back (a restored or hand-edited "
        "row)."
    ),
    FailureCode.CANCELLED: _("An operator cancelled the run."),
}
