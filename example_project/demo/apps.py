from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class DemoConfig(AppConfig):
    """The demo app: contacts imported from a fake CRM by django-leasejobs jobs."""

    name = "demo"
    verbose_name = _("Demo: CRM contacts")
    default_auto_field = "django.db.models.BigAutoField"
