"""The state of flow control (SPEC §14): concurrency slots and rate state, per job and key.

Rows are created when a key is first limited and pruned with retention once
idle. A key of ``""`` is the job's own limit (a job without ``key=``).
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from django_leasejobs.fields import KeyField
from django_leasejobs.ids import ID_LENGTH
from django_leasejobs.limits import KEY_LENGTH

from .runs import JOB_NAME_LENGTH

__all__ = ["RateState", "Slot"]


class Slot(models.Model):
    """One of a job's (per key) ``concurrency`` slots (C2).

    Held while the run it names holds the lease ``owner`` names, begun and
    unexpired: there is no expiry of its own to renew or to clear, so the
    lease's renewals renew it, the pass's outcome -- which lets go of the
    lease -- releases it, and a crashed pass's slot frees when its lease
    expires. Taking one is a compare-and-set on the holder it was seen with.
    """

    job = KeyField(_("job"), max_length=JOB_NAME_LENGTH)
    key = KeyField(_("limit key"), max_length=KEY_LENGTH, blank=True, default="")
    number = models.PositiveIntegerField(_("number"))
    run_id = models.CharField(_("run"), max_length=ID_LENGTH, null=True, blank=True)
    owner = models.CharField(_("lease owner"), max_length=ID_LENGTH, null=True, blank=True)

    class Meta:
        verbose_name = _("concurrency slot")
        verbose_name_plural = _("concurrency slots")
        constraints = [
            models.UniqueConstraint(fields=["job", "key", "number"], name="leasejobs_slot_number"),
        ]

    def __str__(self) -> str:
        return f"{self.job}[{self.key}] slot {self.number}"


class RateState(models.Model):
    """A job's (per key) rate state (C3): the theoretical arrival time of the next begin.

    A pass may begin when ``tat`` is not after now; beginning pushes it to
    now + ``per / n``. One conditional ``UPDATE`` on the database clock.
    """

    job = KeyField(_("job"), max_length=JOB_NAME_LENGTH)
    key = KeyField(_("limit key"), max_length=KEY_LENGTH, blank=True, default="")
    tat = models.DateTimeField(_("next begin allowed at"))

    class Meta:
        verbose_name = _("rate state")
        verbose_name_plural = _("rate states")
        constraints = [
            models.UniqueConstraint(fields=["job", "key"], name="leasejobs_ratestate_key"),
        ]

    def __str__(self) -> str:
        return f"{self.job}[{self.key}] next at {self.tat}"
