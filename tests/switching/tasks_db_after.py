"""Recipe (a), the settings after: the same tasks on this backend."""

from __future__ import annotations

# [settings]
# settings.py, with "django_leasejobs" in INSTALLED_APPS in place of "django_tasks_db"
TASKS = {
    "default": {
        "BACKEND": "django_leasejobs.tasks.LeaseJobsBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {
            # What django-tasks-db never does: up to 3 attempts, with back-off.
            "RETRY": {"max_attempts": 3},
        },
    }
}
