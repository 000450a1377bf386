"""What a failed task keeps and shows of its failure (SPEC §9, §10, §11).

The attempt's ``TaskError`` names the exception and keeps its traceback --
the cause of a task that no longer imports included -- and wherever the
exception leaves the worker, Django's own ``task_finished`` log line
included, it says no more than the run's ``last_error``: only the type with
``REDACT_ERRORS``, database URLs masked always.
"""

from __future__ import annotations

import logging

import pytest
from django.test import override_settings

from django_leasejobs import RunStatus, compat
from django_leasejobs.models import Run, TaskAttempt
from django_leasejobs.tasks import RedactedError
from tests import tasks
from tests.task_helpers import Status, drive
from tests.utils import fresh

pytestmark = pytest.mark.django_db

#: The logger of Django's own task signal receivers: ``django.tasks``, or the backport's.
FRAMEWORK_LOGGER = "django.tasks" if compat.FRAMEWORK == "django.tasks" else "django_tasks"

URL = "postgres://app:hun/ter2@host/db"
MASKED = "postgres://***@host/db"


# -- §11: a task path that no longer imports ---------------------------------------------------


@pytest.mark.parametrize(
    ("path", "cause"),
    [
        ("tests.gone_module.add", "ModuleNotFoundError: No module named 'tests.gone_module'"),
        ("tests.tasks.removed_since", 'ImportError: Module "tests.tasks" does not define'),
    ],
)
def test_tasks_s9_a_task_path_that_no_longer_imports_keeps_the_import_error_as_the_cause(
    path, cause
):
    """SPEC §9 revision 3: the stored traceback shows why; ``last_error`` stays one clear line."""
    gone = tasks.add.enqueue(1, 1)
    run = Run.objects.get(pk=gone.id)
    Run.objects.filter(pk=gone.id).update(payload=run.payload.replace("tests.tasks.add", path))
    assert drive().failed == 1
    (attempt,) = TaskAttempt.objects.filter(run_id=gone.id)
    assert attempt.error_class == "django_leasejobs.exceptions.TaskGone"
    assert cause in attempt.traceback
    assert "The above exception was the direct cause of the following exception" in (
        attempt.traceback
    )
    failed = fresh(run)
    assert failed.status == RunStatus.FAILED
    assert failed.last_error.startswith(f"TaskGone: task {path!r} does not import (")
    assert "Traceback" not in failed.last_error


# -- R2: a return value past VALUE_MAX_BYTES ---------------------------------------------------


def test_tasks_s9_r2_a_return_value_past_value_max_bytes_is_the_attempts_not_queue_safe(settings):
    """SPEC §9, R2: refused as every other return value is -- ``NotQueueSafe``, on the attempt."""
    settings.LEASEJOBS = {**getattr(settings, "LEASEJOBS", {}), "VALUE_MAX_BYTES": 256}
    enqueued = tasks.returns_text.enqueue(1000)
    assert drive().failed == 1
    result = tasks.returns_text.get_result(enqueued.id)
    assert result.status == Status.FAILED
    assert len(result.errors) == result.attempts == 1
    error = result.errors[-1]
    assert error.exception_class_path == "django_leasejobs.exceptions.NotQueueSafe"
    assert issubclass(error.exception_class, TypeError)
    assert "return_value is 1002 bytes of JSON" in error.traceback
    assert "LEASEJOBS['VALUE_MAX_BYTES'] (256 bytes)" in error.traceback
    run = Run.objects.get(pk=enqueued.id)
    assert run.last_error.startswith("NotQueueSafe: return_value is 1002 bytes of JSON")
    assert run.result is None


# -- §10: the log says what last_error says ----------------------------------------------------


def _logged(caplog):
    """Each record's message and formatted traceback, as a handler would write them."""
    formatter = logging.Formatter()
    return [
        (
            record,
            record.getMessage(),
            formatter.formatException(record.exc_info) if record.exc_info else "",
        )
        for record in caplog.records
    ]


def _the_framework_error(caplog, result_id=None):
    """Django's own ``task_finished`` ERROR line (of *result_id*'s task), with a traceback."""
    (record,) = [
        record
        for record in caplog.records
        if record.name == FRAMEWORK_LOGGER
        and record.levelno == logging.ERROR
        and (result_id is None or record.args[0] == result_id)
    ]
    assert record.exc_info
    assert record.exc_info[1] is not None
    return record


def test_tasks_s10_with_redact_errors_the_task_finished_log_keeps_only_the_type(caplog):
    """SPEC §10: with ``REDACT_ERRORS`` no log record carries the task's message, nor its URL."""
    caplog.set_level(logging.INFO)
    with override_settings(LEASEJOBS={"REDACT_ERRORS": True}):
        enqueued = tasks.explode.enqueue(f"could not reach {URL}")
        assert drive().failed == 1
    record = _the_framework_error(caplog)
    last_error = Run.objects.get(pk=enqueued.id).last_error
    assert last_error == "ValueError"
    assert type(record.exc_info[1]) is RedactedError
    assert str(record.exc_info[1]) == last_error
    assert "tests/tasks.py" in logging.Formatter().formatException(record.exc_info)  # frames kept
    for _record, message, formatted in _logged(caplog):
        for text in (message, formatted):
            assert "hun/ter2" not in text
            assert "could not reach" not in text
    assert "hun/ter2" not in caplog.text


def test_tasks_s10_with_redact_errors_a_causes_message_stays_out_of_the_log_too(caplog):
    """SPEC §10: the chain is the task's too: with ``REDACT_ERRORS`` none of it is logged."""
    with override_settings(LEASEJOBS={"REDACT_ERRORS": True}):
        tasks.fails_connecting.enqueue(URL)
        assert drive().failed == 1
    record = _the_framework_error(caplog)
    assert str(record.exc_info[1]) == "RuntimeError"
    assert "hun/ter2" not in caplog.text
    assert "could not reach" not in caplog.text  # the cause is not printed at all
    assert "The above exception was the direct cause" not in caplog.text


def test_tasks_s10_without_redaction_the_task_finished_log_masks_a_database_url(caplog):
    """SPEC §10: database URLs are masked always: the log has last_error's masked text."""
    caplog.set_level(logging.INFO)
    enqueued = tasks.explode.enqueue(f"could not reach {URL}")
    plain = tasks.explode.enqueue("a plain message")
    assert drive().failed == 2
    record = _the_framework_error(caplog, enqueued.id)
    last_error = Run.objects.get(pk=enqueued.id).last_error
    assert last_error == f"ValueError: could not reach {MASKED}"
    assert str(record.exc_info[1]) == last_error
    assert MASKED in logging.Formatter().formatException(record.exc_info)
    for _record, message, formatted in _logged(caplog):
        assert "hun/ter2" not in message
        assert "hun/ter2" not in formatted
    assert "hun/ter2" not in caplog.text
    (error,) = tasks.explode.get_result(enqueued.id).errors
    assert MASKED in error.traceback  # and the stored traceback says no more
    assert "hun/ter2" not in error.traceback
    # SPEC §9: with nothing to hide, the receiver sees the task's own exception.
    itself = _the_framework_error(caplog, plain.id).exc_info[1]
    assert (type(itself), str(itself)) == (ValueError, "a plain message")


def test_tasks_s10_without_redaction_a_causes_database_url_is_masked_in_the_log(caplog):
    """SPEC §10: the cause a log prints under the task's exception is masked as well."""
    tasks.fails_connecting.enqueue(URL)
    assert drive().failed == 1
    formatted = logging.Formatter().formatException(_the_framework_error(caplog).exc_info)
    assert f"ConnectionError: could not reach {MASKED}" in formatted
    assert "RuntimeError: the report could not be sent" in formatted
    assert "The above exception was the direct cause of the following exception" in formatted
    assert "hun/ter2" not in caplog.text
