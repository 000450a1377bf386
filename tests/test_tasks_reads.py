"""Reading a task run back costs one statement (SPEC §9, §13).

``get_result()`` and ``TaskResult.refresh()`` read the run LEFT JOINed to
its attempts, as django-tasks-db's ``get_result()`` costs one read: the
numbers are pinned here for a run with no attempt, with one, and with
several failed ones.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from django_leasejobs.tasks.options import BACKEND_PATH
from tests import tasks
from tests.task_helpers import Status, drive

pytestmark = pytest.mark.django_db

#: Retried at once (no back-off), so each drive is one attempt.
THREE_AT_ONCE = {"max_attempts": 3, "base": timedelta(0), "cap": timedelta(0)}


def read(result_id):
    """``get_result(result_id)``, and the statements it sent."""
    with CaptureQueriesContext(connection) as queries:
        result = tasks.explode.get_result(result_id)
    return result, [query["sql"] for query in queries]


def test_tasks_s9_get_result_of_a_run_with_no_attempt_is_one_query():
    """SPEC §9: a task just enqueued reads back READY, in one statement."""
    enqueued = tasks.explode.enqueue("never run")
    result, sent = read(enqueued.id)
    assert len(sent) == 1, sent
    assert (result.status, result.attempts, result.errors) == (Status.READY, 0, [])
    assert result.worker_ids == []
    assert result.started_at is None


def test_tasks_s9_get_result_and_refresh_of_a_run_with_failed_retries_are_one_query_each():
    """SPEC §9: several attempts, each with its error, still one statement."""
    with override_settings(
        TASKS={"default": {"BACKEND": BACKEND_PATH, "OPTIONS": {"RETRY": THREE_AT_ONCE}}}
    ):
        enqueued = tasks.explode.enqueue("again")
        assert drive().retrying == 1
        assert drive().retrying == 1
        result, sent = read(enqueued.id)
        assert len(sent) == 1, sent
        assert (result.status, result.attempts, len(result.errors)) == (Status.READY, 2, 2)
        assert drive().failed == 1
        with CaptureQueriesContext(connection) as refreshing:
            result.refresh()
    assert len(refreshing) == 1, [query["sql"] for query in refreshing]
    assert result.status == Status.FAILED
    assert result.attempts == len(result.errors) == 3
    assert [e.exception_class_path for e in result.errors] == ["builtins.ValueError"] * 3
    assert all("ValueError: again" in e.traceback for e in result.errors)
    assert result.started_at < result.last_attempted_at <= result.finished_at


def test_tasks_s9_get_result_of_a_successful_run_is_one_query_with_its_value():
    """SPEC §9: the return value is the run's own column, in the same statement."""
    enqueued = tasks.add.enqueue(2, 3)
    assert drive().completed == 1
    with CaptureQueriesContext(connection) as queries:
        result = tasks.add.get_result(enqueued.id)
    assert len(queries) == 1
    assert (result.status, result.return_value, result.attempts) == (Status.SUCCESSFUL, 5, 1)
