"""Django's task framework, on django-leasejobs runs (SPEC §9).

``TASKS = {"default": {"BACKEND": "django_leasejobs.tasks.LeaseJobsBackend"}}``
makes every ``@task`` a leased, fenced, retried run of the built-in job
``django_leasejobs.task``, driven by ``rundueJobs`` and shown in the admin.
Django 6 ships the framework as ``django.tasks``; on Django 5.2 install
``django-leasejobs[tasks]`` for the backport (:mod:`django_leasejobs.compat`).

The path of a task run: :mod:`.backend` (enqueue, get_result; :mod:`.options`,
what ``OPTIONS`` and ``@task(...)`` set) -> :mod:`.envelope` (what the run
stores) -> :mod:`.execution` (the built-in job and its pass: :mod:`.calls`,
the call resolved once per pass; :mod:`.attempts`, the row each pass adds;
:mod:`.failures`, what a failure shows) -> :mod:`.finished` (``task_finished``
at the final outcome) -> :mod:`.results` (the run read back as a
``TaskResult``). :mod:`.aliases` names the ``TASKS`` aliases on this backend.

Imports run one way. What defines a task and reads it back --
:mod:`.options`, :mod:`.backoff`, :mod:`.envelope`, :mod:`.scheduled`,
:mod:`.results` -- stands below :mod:`.backend`; what runs one --
:mod:`.aliases`, :mod:`.calls`, :mod:`.finished`, :mod:`.execution` --
above it. Of those below, only :mod:`.results` imports the models, and the
backend imports it inside the methods that read runs: a ``@task`` is
defined with no model loaded.
"""

from __future__ import annotations

from django_leasejobs.exceptions import RedactedError

from .backend import LeaseJobsBackend
from .options import TASK_JOB, LeaseJobsTask

__all__ = ["TASK_JOB", "LeaseJobsBackend", "LeaseJobsTask", "RedactedError"]
