"""The exceptions the task backend and the test helpers raise live in ``exceptions.py`` (§9).

One module, one hierarchy: each is a :class:`~django_leasejobs.LeaseJobsError`
whose docstring is its default message, and each is still importable from
where its users import it.
"""

from __future__ import annotations

import pytest
from django.utils.module_loading import import_string

from django_leasejobs import LeaseJobsError, exceptions, tasks, testing
from django_leasejobs.report import DriveReport

MOVED = ["TaskGone", "RedactedError", "DrivesExhausted", "StartContended"]


@pytest.mark.parametrize("name", MOVED)
def test_tasks_s9_each_exception_is_a_leasejobs_error_in_exceptions_py(name):
    kind = getattr(exceptions, name)
    assert issubclass(kind, LeaseJobsError)
    assert kind.__module__ == "django_leasejobs.exceptions"
    assert name in exceptions.__all__


@pytest.mark.parametrize("name", ["TaskGone", "RedactedError", "StartContended"])
def test_tasks_s9_an_exceptions_docstring_is_its_default_message(name):
    kind = getattr(exceptions, name)
    assert str(kind()) == kind.__doc__.strip()


def test_tasks_s9_task_gone_is_still_a_lookup_error():
    """Callers that catch ``LookupError`` (the admin, ``get_result()``) still catch it."""
    assert issubclass(exceptions.TaskGone, LookupError)


def test_tasks_s9_moved_exceptions_are_still_importable_from_where_their_users_import_them():
    assert tasks.RedactedError is exceptions.RedactedError
    assert testing.DrivesExhausted is exceptions.DrivesExhausted
    # The path attempts recorded before the move name, in TaskError.exception_class_path.
    assert import_string("django_leasejobs.tasks.envelope.TaskGone") is exceptions.TaskGone


def test_tasks_s9_drives_exhausted_keeps_its_report():
    report = DriveReport()
    raised = exceptions.DrivesExhausted(3, report)
    assert raised.report is report
    assert str(raised).startswith("runs were still due after 3 drives")
