"""The attempts of a Django task's run: who began each one, and how it failed (SPEC §9).

A side table rather than JSON columns on the run: each BEGIN of a task adds
one short row instead of rewriting a growing list in the run row (the hot,
indexed row every lease write touches), two workers never race a
read-modify-write on one list, and retention deletes the rows with their run.
``TaskResult.worker_ids`` and ``errors`` are read from here.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from django_leasejobs.ids import ID_LENGTH

from .runs import Run

__all__ = ["WORKER_ID_LENGTH", "TaskAttempt"]

#: ``TaskResult.worker_ids`` entries are at most this long (SPEC §9).
WORKER_ID_LENGTH = 64


class TaskAttempt(models.Model):
    """One begun pass of a Django task's run."""

    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="task_attempts", verbose_name=_("run")
    )
    owner = models.CharField(
        _("lease owner"), max_length=ID_LENGTH, help_text=_("The token of the pass's lease.")
    )
    worker_id = models.CharField(_("worker id"), max_length=WORKER_ID_LENGTH)
    began_at = models.DateTimeField(_("began at"))
    error_class = models.CharField(
        _("error class"),
        max_length=255,
        blank=True,
        default="",
        help_text=_("The dotted path of the exception the attempt ended with; empty for none."),
    )
    traceback = models.TextField(_("traceback"), blank=True, default="")

    class Meta:
        verbose_name = _("task attempt")
        verbose_name_plural = _("task attempts")
        constraints = [
            models.UniqueConstraint(fields=["run", "owner"], name="leasejobs_taskattempt_owner"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id} by {self.worker_id}"
