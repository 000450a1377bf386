"""Schedules and the ledger of missed due times (SPEC §7).

The definition of a schedule is the code (S1); a row holds its state.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.utils.translation import gettext_lazy as _

from django_leasejobs.fields import KeyField
from django_leasejobs.states import OUTCOME_LENGTH, MissedAction, MissedCause, MissedRule, RunStatus

from .runs import JOB_NAME_LENGTH, Run

__all__ = ["ACTOR_LENGTH", "NOTE_LENGTH", "Missed", "Schedule"]

#: Who paused: a user name, as long as ``auth.User.username`` may be.
ACTOR_LENGTH = 150
#: Pause notes are short: they are read in a list (S4).
NOTE_LENGTH = 200


def _run_link(verbose_name: Any, *, related_name: str) -> models.ForeignKey[Run | None, Run | None]:
    """A link to a run that may outlive it: retention deletes old runs, not what points at them."""
    return models.ForeignKey(
        Run,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name=related_name,
        verbose_name=verbose_name,
    )


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
    paused_by = models.CharField(_("paused by"), max_length=ACTOR_LENGTH, blank=True, default="")
    pause_note = models.CharField(_("pause note"), max_length=NOTE_LENGTH, blank=True, default="")
    # The last pause that ended: the due times it missed are recorded as "paused" (S3).
    last_paused_at = models.DateTimeField(_("last paused at"), null=True, blank=True)
    resumed_at = models.DateTimeField(_("resumed at"), null=True, blank=True)
    # Due times up to this one are accounted for -- fired, recorded as missed, or
    # before the row existed -- so a changed expression continues from it (S1).
    last_due_at = models.DateTimeField(_("last due at"), null=True, blank=True)
    # When a drive that registers the job last synced the row, for "orphaned" (S1, S6).
    seen_at = models.DateTimeField(_("seen at"), null=True, blank=True)
    last_run = _run_link(_("last run"), related_name="+")
    last_run_at = models.DateTimeField(_("last run at"), null=True, blank=True)
    # The last scheduled run's final status, done or failed (S6).
    last_outcome = models.CharField(
        _("last outcome"),
        max_length=OUTCOME_LENGTH,
        choices=RunStatus.choices,
        blank=True,
        default="",
    )
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
    run = _run_link(_("run"), related_name="missed")
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
