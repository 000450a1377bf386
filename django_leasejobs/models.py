"""Runs and their step ledger (SPEC §2).

Only :mod:`django_leasejobs.store` writes status or lease columns; these
classes describe the tables and decode what they hold.
"""

from __future__ import annotations

from typing import ClassVar

from django.db import models
from django.utils.translation import gettext_lazy as _

from .codec import Decoded, decode
from .fields import KeyField
from .ids import new_id
from .querysets import RunQuerySet
from .registry import MissedRule
from .states import FailureCode, RunOrigin, RunStatus

__all__ = ["Missed", "MissedAction", "MissedCause", "Run", "Schedule", "Step"]

JOB_NAME_LENGTH = 100
INSTANCE_LENGTH = 200


class Run(models.Model):
    """One durable run of a job: what an operator reads afterwards."""

    id = models.CharField(_("id"), primary_key=True, max_length=26, default=new_id, editable=False)
    job = KeyField(_("job"), max_length=JOB_NAME_LENGTH)
    instance = KeyField(_("instance"), max_length=INSTANCE_LENGTH, default="default")
    origin = models.CharField(
        _("origin"),
        max_length=max(len(value) for value in RunOrigin.values),
        choices=RunOrigin.choices,
        default=RunOrigin.API,
        help_text=_("How the run began."),
    )
    payload = models.TextField(_("payload (JSON)"), default="null")
    status = models.CharField(
        _("status"),
        max_length=max(len(value) for value in RunStatus.values),
        choices=RunStatus.choices,
        default=RunStatus.RUNNING,
    )
    cursor = models.TextField(
        _("cursor (JSON)"),
        null=True,
        blank=True,
        help_text=_("Where the next pass resumes; empty until a pass commits."),
    )
    counters = models.TextField(_("counters (JSON)"), default="{}")
    attempts = models.PositiveIntegerField(
        _("attempts"), default=0, help_text=_("Consecutive failed passes.")
    )
    failure_code = models.CharField(
        _("failure code"),
        max_length=max(len(value) for value in FailureCode.values),
        choices=FailureCode.choices,
        blank=True,
        default="",
    )
    last_error = models.TextField(_("last error"), blank=True, default="")
    started_at = models.DateTimeField(_("started at"))
    updated_at = models.DateTimeField(_("updated at"))
    next_attempt_at = models.DateTimeField(
        _("next attempt at"),
        null=True,
        blank=True,
        help_text=_("When the run is next due; while leased, when the lease expires."),
    )
    ended_at = models.DateTimeField(_("ended at"), null=True, blank=True)
    lease_owner = models.CharField(_("lease owner"), max_length=26, null=True, blank=True)
    lease_began_at = models.DateTimeField(_("lease began at"), null=True, blank=True)
    lease_holder = models.CharField(
        _("lease holder"),
        max_length=255,
        blank=True,
        default="",
        help_text=_("The process that claimed the run: host, pid and process start time."),
    )
    admission_misses = models.PositiveIntegerField(_("admission misses"), null=True, blank=True)
    rerun_requested = models.BooleanField(
        _("rerun requested"),
        default=False,
        help_text=_("Start one more run with the latest payload when this one completes."),
    )
    rerun_payload = models.TextField(_("rerun payload (JSON)"), null=True, blank=True)
    has_steps = models.BooleanField(
        _("has step rows"),
        default=False,
        editable=False,
        help_text=_(
            "The step ledger holds rows: of the pass in flight, or of the last failed one."
        ),
    )
    progress_total = models.PositiveBigIntegerField(_("progress total"), null=True, blank=True)
    live_key = KeyField(
        _("live key"),
        max_length=JOB_NAME_LENGTH + 1 + INSTANCE_LENGTH,
        null=True,
        blank=True,
        editable=False,
        help_text=_("job|instance while the run is live; empty once it has finished."),
    )

    objects: ClassVar[RunQuerySet] = RunQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        verbose_name = _("run")
        verbose_name_plural = _("runs")
        permissions = [
            ("cancel_run", _("Can cancel a run")),
            ("retry_run", _("Can retry a failed or cancelled run")),
            ("release_run", _("Can release a held run")),
        ]
        indexes = [
            # The drive's due read (D1) is one range over this index: status
            # first, so its cost tracks live runs, not the retained history.
            models.Index(fields=["status", "next_attempt_at", "id"], name="leasejobs_run_due"),
            # The admin's list (A1): newest first, filtered by status, job or
            # failure code, over a million retained runs without a sort.
            models.Index(fields=["status", "id"], name="leasejobs_run_status"),
            models.Index(fields=["job", "id"], name="leasejobs_run_job"),
            models.Index(fields=["failure_code", "id"], name="leasejobs_run_failure"),
            models.Index(fields=["instance", "id"], name="leasejobs_run_instance"),
        ]
        constraints = [
            # Coalescing (R1) is the database's decision, not a read-then-insert:
            # NULLs do not collide, so finished runs release their key.
            models.UniqueConstraint(fields=["live_key"], name="leasejobs_run_live_key"),
        ]

    def __str__(self) -> str:
        return f"{self.job}[{self.instance}] {self.id} ({self.status})"

    @property
    def is_live(self) -> bool:
        return self.status in (RunStatus.RUNNING, RunStatus.HELD)

    def decoded_payload(self) -> Decoded:
        return decode(self.payload)

    def decoded_cursor(self) -> Decoded:
        return decode(self.cursor)

    def decoded_counters(self) -> Decoded:
        return decode(self.counters, empty={})

    def decoded_rerun_payload(self) -> Decoded:
        return decode(self.rerun_payload)

    @property
    def decode_errors(self) -> dict[str, str]:
        """Which JSON columns do not parse, and why (empty when all do)."""
        fields = {
            "payload": self.decoded_payload(),
            "cursor": self.decoded_cursor(),
            "counters": self.decoded_counters(),
        }
        return {name: value.error for name, value in fields.items() if value.error}


class Step(models.Model):
    """One named step of the pass in flight: the ledger that makes steps run once (R5)."""

    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="steps", verbose_name=_("run")
    )
    name = KeyField(_("name"), max_length=200)
    result = models.TextField(
        _("result (JSON)"), null=True, blank=True, help_text=_("Empty = not completed.")
    )
    attempts = models.PositiveIntegerField(_("attempts"), default=0)
    last_error = models.TextField(_("last error"), blank=True, default="")
    recorded_at = models.DateTimeField(_("recorded at"))

    class Meta:
        verbose_name = _("step")
        verbose_name_plural = _("steps")
        constraints = [
            models.UniqueConstraint(fields=["run", "name"], name="leasejobs_step_run_name"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({'done' if self.completed else 'not done'})"

    @property
    def completed(self) -> bool:
        return self.result is not None

    def decoded_result(self) -> Decoded:
        return decode(self.result)


class MissedCause(models.TextChoices):
    WORKER_DOWN = "worker_down", _("No drive ran at the due time")
    PAUSED = "paused", _("The schedule was paused")


class MissedAction(models.TextChoices):
    SKIPPED = "skipped", _("Skipped")
    CAUGHT_UP = "caught_up", _("Caught up")


class Schedule(models.Model):
    """The state of one scheduled job (SPEC §7). The definition is the code (S1)."""

    job = KeyField(_("job"), max_length=JOB_NAME_LENGTH, unique=True)
    expression = models.CharField(_("cron expression"), max_length=200)
    timezone = models.CharField(_("time zone"), max_length=64)
    rule = models.CharField(
        _("missed-run rule"),
        max_length=max(len(value) for value in MissedRule.values),
        choices=MissedRule.choices,
        default=MissedRule.CATCH_UP_ONCE,
    )
    next_due_at = models.DateTimeField(_("next due at"), null=True, blank=True)
    enabled = models.BooleanField(
        _("enabled"), default=True, help_text=_("False once the job's schedule left the code.")
    )
    paused_at = models.DateTimeField(_("paused at"), null=True, blank=True)
    paused_by = models.CharField(_("paused by"), max_length=150, blank=True, default="")
    pause_note = models.CharField(_("pause note"), max_length=200, blank=True, default="")
    last_paused_at = models.DateTimeField(
        _("last paused at"),
        null=True,
        blank=True,
        help_text=_(
            "When the last pause that has ended began (its due times were missed: paused)."
        ),
    )
    resumed_at = models.DateTimeField(_("resumed at"), null=True, blank=True)
    last_due_at = models.DateTimeField(
        _("last due at"),
        null=True,
        blank=True,
        help_text=_(
            "Due times up to this one are accounted for (fired, recorded as missed, or "
            "before the row existed); a changed expression continues from it."
        ),
    )
    seen_at = models.DateTimeField(
        _("seen at"),
        null=True,
        blank=True,
        help_text=_("When a drive that registers the job last synced this row (S1)."),
    )
    last_run = models.ForeignKey(
        Run,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("last run"),
    )
    last_run_at = models.DateTimeField(_("last run at"), null=True, blank=True)
    last_outcome = models.CharField(_("last outcome"), max_length=16, blank=True, default="")
    last_success_at = models.DateTimeField(_("last success at"), null=True, blank=True)
    overdue_since = models.DateTimeField(
        _("overdue since"),
        null=True,
        blank=True,
        help_text=_("Set when job_overdue was sent for the current episode."),
    )
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("schedule")
        verbose_name_plural = _("schedules")
        permissions = [
            ("pause_schedule", _("Can pause and resume a schedule")),
            ("run_schedule_now", _("Can run a scheduled job now")),
        ]
        indexes = [
            models.Index(fields=["enabled", "next_due_at"], name="leasejobs_schedule_due"),
        ]

    def __str__(self) -> str:
        return f"{self.job} ({self.expression}, {self.timezone})"


class Missed(models.Model):
    """One due time that did not run on time, and what its rule did about it (S3)."""

    job = KeyField(_("job"), max_length=JOB_NAME_LENGTH)
    due_at = models.DateTimeField(_("due at"))
    cause = models.CharField(
        _("cause"),
        max_length=max(len(value) for value in MissedCause.values),
        choices=MissedCause.choices,
    )
    action = models.CharField(
        _("action"),
        max_length=max(len(value) for value in MissedAction.values),
        choices=MissedAction.choices,
    )
    run = models.ForeignKey(
        Run,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="missed",
        verbose_name=_("run"),
    )
    recorded_at = models.DateTimeField(_("recorded at"))

    class Meta:
        verbose_name = _("missed due time")
        verbose_name_plural = _("missed due times")
        constraints = [
            # Each due time is recorded once, whichever drive or resume saw it first.
            models.UniqueConstraint(fields=["job", "due_at"], name="leasejobs_missed_job_due"),
        ]
        indexes = [models.Index(fields=["recorded_at"], name="leasejobs_missed_recorded")]

    def __str__(self) -> str:
        return f"{self.job} @ {self.due_at:%Y-%m-%d %H:%M} ({self.action})"
