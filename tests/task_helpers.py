"""What the task backend's tests share (SPEC §9): the aliases they run under, and one drive."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import TestCase, override_settings

from django_leasejobs import compat, run_due_jobs
from django_leasejobs.tasks import TASK_JOB
from django_leasejobs.tasks.options import BACKEND_PATH
from tests import tasks

Status = compat.TaskResultStatus

#: Per-task ``@task(...)`` options need a framework that passes extra keywords to
#: ``task_class``: Django 6.1 and the backport do, Django 6.0 does not.
needs_task_options = pytest.mark.elsewhere(
    not tasks.PER_TASK_OPTIONS,  # Django 6.0
    reason="Django 6.0's @task passes no extra keywords to task_class, so per-task "
    "options do not exist there (SPEC §9: Django 6.1 and the backport)",
)

#: Retried at once (no back-off), so each drive is one attempt.
AT_ONCE = {"base": timedelta(0), "cap": timedelta(0)}


def ours(options=None):
    """One ``TASKS`` alias on this backend, with the test project's queues."""
    return {"BACKEND": BACKEND_PATH, "QUEUES": ["default", "emails"], "OPTIONS": options or {}}


def tasks_with(options=None):
    """``override_settings`` for the default alias on this backend with *options*."""
    return override_settings(TASKS={"default": ours(options)})


def drive(**options):
    """One drive of the task runs only (module-level test jobs stay out of it).

    The run signals ``task_finished`` rides on are sent on commit, which the
    test's own transaction never reaches: they are delivered as the drive ends,
    as a drive in autocommit delivers each at its outcome.
    """
    with TestCase.captureOnCommitCallbacks(execute=True):
        return run_due_jobs(jobs=[TASK_JOB], **options)
