from __future__ import annotations

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules
from django.utils.translation import gettext_lazy as _


class LeaseJobsConfig(AppConfig):
    name = "django_leasejobs"
    label = "leasejobs"
    verbose_name = _("Lease jobs")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks, signal_handlers  # noqa: F401  Register checks and log receivers.

        # Like admin.py: every installed app's jobs module registers its jobs,
        # so a bad job definition fails here, at startup, naming the job.
        autodiscover_modules("jobs")
        # The built-in job of Django tasks, when TASKS names our backend (SPEC §9).
        from .tasks.execution import register

        register()
