"""The demo's data: contacts copied from the (fake) CRM by ``demo.import_contacts``."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class Contact(models.Model):
    """A CRM contact as last imported.

    ``external_id`` is the CRM's own key and is unique here, so the import can
    upsert on it: saving the same page twice (a retried pass, a replayed step)
    updates the rows it wrote the first time instead of adding copies.
    """

    external_id = models.CharField(_("external id"), max_length=64, unique=True)
    name = models.CharField(_("name"), max_length=200)
    email = models.EmailField(_("email"))
    imported_at = models.DateTimeField(
        _("imported at"), help_text=_("When the import last wrote this row.")
    )

    class Meta:
        verbose_name = _("contact")
        verbose_name_plural = _("contacts")
        ordering = ["external_id"]

    def __str__(self) -> str:
        return f"{self.name} <{self.email}>"
