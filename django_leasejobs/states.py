"""Every vocabulary of the app, as ``TextChoices`` (SPEC §2, §6, §7, §10).

Pure data: no ORM, so every other module can import it. A value stored in a
column or reported to a caller is a member of one of these, never a string
spelled by hand.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

__all__ = [
    "FAILURE_MEANINGS",
    "FINISHED_TASK_STATUSES",
    "LIVE_STATUSES",
    "OUTCOME_LENGTH",
    "STATUS_MEANINGS",
    "UNTIMED_OUTCOMES",
    "DueReason",
    "FailureCode",
    "LeaseState",
    "MissedAction",
    "MissedCause",
    "MissedRule",
    "PassOutcome",
    "RunNowRefusal",
    "RunOrigin",
    "RunStatus",
    "ScheduleState",
    "Throttle",
]


class RunStatus(models.TextChoices):
    """Where a run stands (SPEC §2)."""

    RUNNING = "running", _("Running")  # due or leased: passes still to come
    DONE = "done", _("Done")  # a pass returned p.done()
    FAILED = "failed", _("Failed")  # its retry policy is used up
    CANCELLED = "cancelled", _("Cancelled")  # an operator stopped it
    HELD = "held", _("Held")  # interrupted, not safe to repeat: waits for an operator

    @property
    def meaning(self) -> str:
        """What the status means for an operator, in one line (A8's summary)."""
        return str(STATUS_MEANINGS[self])


#: Kept apart from the choices, as the failure codes' meanings are.
STATUS_MEANINGS = {
    RunStatus.RUNNING: _("Live: it has work left, and a pass of it is due, waiting or in flight."),
    RunStatus.DONE: _("Finished: the job said the work is complete."),
    RunStatus.FAILED: _("Finished: its passes kept failing and it gave up; a retry starts anew."),
    RunStatus.CANCELLED: _("Finished: an operator cancelled it; a retry starts it anew."),
    RunStatus.HELD: _(
        "Stopped mid-pass, and not safe to repeat: nothing runs until an operator "
        "resumes it or fails it."
    ),
}


#: Statuses that hold the coalescing key (SPEC R1): one such run per (job, instance).
LIVE_STATUSES = frozenset({RunStatus.RUNNING, RunStatus.HELD})


#: The width of a column that records a run's final status (``Schedule.last_outcome``):
#: the longest status rounded up to a power of two -- 16, the width the column had
#: before it took the choices, so a longer status up to 16 needs no migration.
OUTCOME_LENGTH = 1 << (max(len(value) for value in RunStatus.values) - 1).bit_length()

#: The task framework's ``TaskResultStatus`` values of a finished result, the ones
#: with a ``finished_at`` (§9). Its values, as this module imports no task framework.
FINISHED_TASK_STATUSES = frozenset({"SUCCESSFUL", "FAILED"})


class RunOrigin(models.TextChoices):
    """How a run began (SPEC §2): the hand-run cap (S5) counts ``hand``."""

    API = "api", _("start()")
    SCHEDULE = "schedule", _("Schedule")
    HAND = "hand", _("Run now (by hand)")
    RETRY = "retry", _("Retry of an earlier run")
    FOLLOW_UP = "follow_up", _("Follow-up of a kicked run")
    TASK = "task", _("Django task")


class Throttle(models.TextChoices):
    """Which limit a throttled run waits for (SPEC C2, C3, C5)."""

    CONCURRENCY = "concurrency", _("Concurrency")
    RATE = "rate", _("Rate")


class LeaseState(models.TextChoices):
    """Where a running run's lease stands, by the database's clock (L1, A8, C5)."""

    FREE = "free", _("No lease")  # waiting for its due time, or not running
    CLAIMED = "claimed", _("Claimed, not begun")  # a claim before its BEGIN (L2, L4)
    LEASED = "leased", _("Leased: a pass in flight")  # begun, unexpired (L4, L7)
    EXPIRED = "expired", _("Expired")  # its holder stopped renewing: due to be taken (L3)
    THROTTLED = "throttled", _("Waiting for its limit")  # refused by its job's limit (C2, C3)


class DueReason(models.TextChoices):
    """Why a run is (or is not) due when it is: what the admin's "next due" column says (A7)."""

    DUE_NOW = "due_now", _("due now")  # any worker's next drive takes it
    RUN_AFTER = "run_after", _("first pass not yet due")  # start(run_after=...)
    RETRY = "retry", _("retry back-off")  # after failed passes (R4)
    ADMISSION = "admission", _("claim back-off")  # claims that did not begin (L5)
    RATE = "rate", _("rate limit")  # throttled until the rate allows (C3)
    CONCURRENCY = "concurrency", _("waiting for a slot")  # throttled (C2)
    DEFERRED = "deferred", _("deferred")  # its handler raised Defer (R8)
    LEASED = "leased", _("running now")  # a pass in flight, until the expiry
    CLAIMED = "claimed", _("claimed, not begun")  # a claim before BEGIN (L4)
    LEASE_EXPIRED = "lease_expired", _("lease expired")  # due for takeover (L3)
    QUEUE_PAUSED = "queue_paused", _("queue paused")  # no pass begins (W6)
    HELD = "held", _("waiting for an operator")  # release: resume or fail (A4)
    STOPPING = "stopping", _("cancelled, pass stopping")  # keeps its key (§3)
    NEVER_DUE = "never_due", _("never due")  # running with no due time (§11)
    NONE = "none", _("not due")  # finished: no pass to come


class PassOutcome(models.TextChoices):
    """What one pass -- or one claim that never began -- came to (the DriveReport's counts)."""

    ADVANCED = "advanced", _("Advanced")  # committed a cursor; the run goes on
    COMPLETED = "completed", _("Completed")  # committed p.done()
    RETRYING = "retrying", _("Retrying")  # failed; due again after a back-off
    FAILED = "failed", _("Failed")  # failed for good
    SUPERSEDED = "superseded", _("Superseded")  # lost its lease, or never began (L5, L6)
    DEFERRED = "deferred", _("Deferred")  # raised Defer, or released at a stop (R8)
    HELD = "held", _("Held")  # taken over, not safe to repeat (L3)
    THROTTLED = "throttled", _("Throttled")  # its job's limit was reached: nothing ran (C2, C3)


#: Outcomes in which no handler ran -- a takeover held for an operator (L3), a pass its
#: limit refused (C2, C3) -- counted as passes but never as pass durations (O1, O2, O4):
#: their milliseconds of bookkeeping would read as fast passes in every percentile.
UNTIMED_OUTCOMES = frozenset({PassOutcome.HELD, PassOutcome.THROTTLED})


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


class MissedRule(models.TextChoices):
    """What a schedule does with due times that passed while nothing ran (S3)."""

    SKIP = "skip", _("Skip: record them, run nothing")
    CATCH_UP_ONCE = "catch_up_once", _("Catch up once: record them, run once")
    REQUIRED = "required", _("Required: run every one, oldest first")


class MissedCause(models.TextChoices):
    """Why a due time was missed (S3)."""

    WORKER_DOWN = "worker_down", _("No drive ran at the due time")
    PAUSED = "paused", _("The schedule was paused")


class MissedAction(models.TextChoices):
    """What the rule did with a missed due time (S3)."""

    SKIPPED = "skipped", _("Skipped")
    CAUGHT_UP = "caught_up", _("Caught up")


class ScheduleState(models.TextChoices):
    """What a schedule reads as (S6), checked in this order."""

    ORPHANED = "orphaned", _("Orphaned")  # no drive registered the job for ORPHAN_AFTER
    PAUSED = "paused", _("Paused")
    STALLED = "stalled", _("Stalled")  # a live run older than its stall_after
    RETRYING = "retrying", _("Retrying")  # a live run whose last pass failed
    RUNNING = "running", _("Running")
    NEVER_RUN = "never_run", _("Never run")
    INVALID = "invalid", _("Invalid")  # an expression or time zone this process cannot plan
    FAILED = "failed", _("Failed")  # the last run failed or was cancelled
    MISSED = "missed", _("Missed")  # no success within twice the period
    OK = "ok", _("OK")

    @classmethod
    def overdue(cls) -> frozenset[ScheduleState]:
        """The states that send ``job_overdue``, once per episode (S6)."""
        return frozenset({cls.STALLED, cls.MISSED})


class RunNowRefusal(models.TextChoices):
    """Why a run by hand was refused (S5)."""

    NOT_SAFE = "not_safe", _("The job is not safe to repeat")
    LIVE = "live", _("The job has a live run")
    CAP = "cap", _("Too many runs by hand in the last hour")
