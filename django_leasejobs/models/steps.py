"""The step ledger of the pass in flight (SPEC §2, R5): what makes a step run once."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from django_leasejobs.codec import Decoded, decode
from django_leasejobs.fields import KeyField

from .runs import Run

__all__ = ["STEP_NAME_LENGTH", "Step"]

STEP_NAME_LENGTH = 200


class Step(models.Model):
    """One named step of the pass in flight: the ledger that makes steps run once (R5)."""

    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="steps", verbose_name=_("run")
    )
    name = KeyField(_("name"), max_length=STEP_NAME_LENGTH)
    result = models.TextField(
        _("result (JSON)"), null=True, blank=True, help_text=_("Empty = not completed.")
    )
    attempts = models.PositiveIntegerField(_("attempts"), default=0)
    last_error = models.TextField(_("last error"), blank=True, default="")
    recorded_at = models.DateTimeField(_("recorded at"))
    began_at = models.DateTimeField(
        _("began at"),
        null=True,
        blank=True,
        help_text=_(
            "For a job not safe to repeat: when the step's function began, written before it "
            "runs and cleared once the attempt is recorded. Set on a step not completed = the "
            "step in flight, which may have half-happened (A8)."
        ),
    )

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

    @property
    def in_flight(self) -> bool:
        """Begun and never recorded: its function may have half-happened (A8)."""
        return self.began_at is not None and self.result is None

    def decoded_result(self) -> Decoded:
        return decode(self.result)
