"""Recipe (a), the settings before: Django tasks on django-tasks-db."""

from __future__ import annotations

# [settings]
# settings.py, with "django_tasks_db" in INSTALLED_APPS
TASKS = {
    "default": {
        "BACKEND": "django_tasks_db.DatabaseBackend",
        "QUEUES": ["default", "emails"],
    }
}
