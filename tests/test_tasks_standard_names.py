"""SPEC §9 revision 4: the names Django is settling on: ``max_attempts``, ``backoff``, ``timeout``.

The proposals' own examples (django/new-features #142 and #144, in
tests/standard_tasks.py as written there) run on this backend unchanged;
``backoff`` answers each retry's delay, or ``None`` to give up; ``retry=``
with either is refused when the task is defined; a ``backoff`` that raises or
answers nonsense fails its run with a clear ``last_error``, and the drive goes on.
"""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest

from django_leasejobs import Retry, RunStatus, compat, verdicts
from django_leasejobs.models import Run
from tests import tasks
from tests.task_helpers import Status, drive, needs_task_options, tasks_with

pytestmark = [pytest.mark.django_db, needs_task_options]

if tasks.PER_TASK_OPTIONS:
    from tests import standard_tasks as st


def run_of(result):
    return Run.objects.get(pk=result.id)


def waits(frozen_clock, result):
    """How long after the frozen now the run is next due."""
    return run_of(result).next_attempt_at - frozen_clock.now()


def plain(*args, **kwargs):
    """A module-level function to decorate in a test (Django refuses nested ones)."""


def a_second(exception, task_result):
    return 1


# -- the proposals' examples -----------------------------------------------------------------


def test_9r4_the_retry_proposals_example_runs_unchanged():
    """#142: ``@task(max_attempts=10, backoff=linear_backoff)`` on ``def my_task(): pass``."""
    with tasks_with():
        enqueued = st.my_task.enqueue()  # "Run at most 10 times, with 30 seconds in between"
        assert enqueued.status == Status.READY
        assert drive().completed == 1
        result = st.my_task.get_result(enqueued.id)
    assert result.status == Status.SUCCESSFUL
    assert result.return_value is None
    assert (st.my_task.max_attempts, st.my_task.backoff) == (10, st.linear_backoff)


def test_9r4_the_retry_proposals_back_off_runs_at_most_10_times_30_seconds_apart(frozen_clock):
    """#142's promise, on a task that fails: 30 s between attempts, 10 attempts, then FAILED."""
    with tasks_with():
        enqueued = st.my_failing_task.enqueue()
        for attempt in range(1, 10):
            assert drive().retrying == 1
            assert waits(frozen_clock, enqueued) == timedelta(seconds=30)
            assert drive().attempted == 0  # not before its back-off
            frozen_clock.advance(timedelta(seconds=30))
            assert st.my_failing_task.get_result(enqueued.id).attempts == attempt
        assert drive().failed == 1
        result = st.my_failing_task.get_result(enqueued.id)
    assert result.status == Status.FAILED
    assert result.attempts == len(result.errors) == 10
    assert {e.exception_class_path for e in result.errors} == {"builtins.ConnectionError"}


def test_9r4_the_timeout_proposals_example_fails_past_its_30_seconds(monkeypatch):
    """#144: ``@task(timeout=30)`` sleeping 60 s fails, marked FAILED, by a timeout.

    Its ``time.sleep(60)`` moves the pass's own monotonic count on by 60 s rather
    than taking a minute of the suite: the example's code is as written.
    """
    slept = SimpleNamespace(seconds=0.0)
    real = verdicts.time.monotonic
    monkeypatch.setattr(verdicts, "time", SimpleNamespace(monotonic=lambda: real() + slept.seconds))
    monkeypatch.setattr(
        st, "time", SimpleNamespace(sleep=lambda s: setattr(slept, "seconds", slept.seconds + s))
    )
    assert st.long_running_task.timeout == timedelta(seconds=30)  # the int is seconds
    with tasks_with():
        enqueued = st.long_running_task.enqueue()
        assert drive().failed == 1
        result = st.long_running_task.get_result(enqueued.id)
    assert slept.seconds == 60
    assert result.status == Status.FAILED
    (error,) = result.errors
    assert error.exception_class_path == "django_leasejobs.exceptions.PassTimedOut"
    assert run_of(enqueued).failure_code == "timeout"


# -- backoff's answers -----------------------------------------------------------------------


def test_9r4_backoff_returning_none_fails_the_run_at_once_with_its_error(frozen_clock):
    with tasks_with():
        given_up = st.picky.enqueue("value")
        retried = st.picky.enqueue("connection")
        report = drive()
        assert (report.failed, report.retrying) == (1, 1)
        result = st.picky.get_result(given_up.id)
    assert result.status == Status.FAILED
    assert result.attempts == 1  # of the 5 max_attempts allows
    assert run_of(given_up).last_error == "ValueError: a value error"
    assert run_of(retried).status == RunStatus.RUNNING
    assert waits(frozen_clock, retried) == timedelta(seconds=30)


def test_9r4_backoff_a_number_of_seconds_sets_the_next_attempt_from_the_result(frozen_clock):
    """``2 ** result.attempts``: the result handed over counts the attempt that failed."""
    with tasks_with():
        enqueued = st.exponential.enqueue()
        for attempt in (1, 2, 3):
            assert drive().retrying == 1
            assert waits(frozen_clock, enqueued) == timedelta(seconds=2**attempt)
            frozen_clock.advance(timedelta(seconds=2**attempt))


def test_9r4_backoff_a_timedelta_sets_the_next_attempt(frozen_clock):
    with tasks_with():
        enqueued = st.in_minutes.enqueue()
        assert drive().retrying == 1
        assert waits(frozen_clock, enqueued) == timedelta(minutes=2)


def test_9r4_backoff_receives_the_exception_and_the_result_after_this_attempt():
    st.SEEN.clear()
    with tasks_with():
        enqueued = st.spied.enqueue("kaput")
        assert drive().failed == 1
    ((exception, result),) = st.SEEN
    assert isinstance(exception, ValueError)
    assert str(exception) == "kaput"
    assert result.id == enqueued.id
    assert result.status == Status.FAILED
    assert result.attempts == 1
    assert [e.exception_class_path for e in result.errors] == ["builtins.ValueError"]


def test_9r4_max_attempts_alone_keeps_the_backends_back_off(frozen_clock):
    """``max_attempts=N`` is ``RETRY`` with N attempts: its base, cap and jitter stay."""
    backend_retry = {"max_attempts": 1, "base": timedelta(seconds=7), "cap": timedelta(seconds=7)}
    with tasks_with({"RETRY": {**backend_retry, "jitter": 0}}):
        enqueued = st.three_attempts.enqueue()
        for _ in range(2):
            assert drive().retrying == 1
            assert waits(frozen_clock, enqueued) == timedelta(seconds=7)
            frozen_clock.advance(timedelta(seconds=7))
        assert drive().failed == 1
        assert st.three_attempts.get_result(enqueued.id).attempts == 3


@pytest.mark.parametrize(
    ("task_name", "error"),
    [
        (
            "backoff_raises",
            "BackoffFailed: task tests.standard_tasks.backoff_raises: its backoff raised "
            "KeyError: 'no such policy'",
        ),
        (
            "backoff_says_nonsense",
            "BackoffFailed: task tests.standard_tasks.backoff_says_nonsense: its backoff "
            "returned 'soon'; it must return a number of seconds or a timedelta, from 0 to "
            "3653 days, or None to give up",
        ),
    ],
)
def test_9r4_a_backoff_that_raises_or_answers_nonsense_fails_its_run_not_the_drive(
    task_name, error
):
    broken = getattr(st, task_name)
    with tasks_with():
        failed = broken.enqueue()
        fine = tasks.add.enqueue(2, 3)
        report = drive()
        assert (report.failed, report.completed, report.aborted) == (1, 1, "")
        assert [note.run_id for note in report.errors] == [failed.id]  # that run's own failure
        result = broken.get_result(failed.id)
        assert tasks.add.get_result(fine.id).return_value == 5
    stored = run_of(failed)
    assert (stored.status, stored.attempts, stored.last_error) == (RunStatus.FAILED, 1, error)
    (recorded,) = result.errors
    assert recorded.exception_class_path == "django_leasejobs.exceptions.BackoffFailed"
    assert "ConnectionError: the API is down" in recorded.traceback  # the task's, as its cause


# -- refused at decoration -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"retry": Retry(max_attempts=2), "max_attempts": 3}, "retry= and max_attempts= both"),
        ({"retry": {"max_attempts": 2}, "backoff": a_second}, "retry= and backoff= both"),
        (
            {"retry": Retry(), "max_attempts": 3, "backoff": a_second},
            "retry= and max_attempts= and backoff= both",
        ),
        ({"max_attempts": 0}, "max_attempts must be an int >= 1, got 0"),
        ({"max_attempts": "3"}, "max_attempts must be an int >= 1, got '3'"),
        ({"max_attempts": True}, "max_attempts must be an int >= 1, got True"),
        ({"backoff": 30}, "backoff must be a callable"),
        ({"timeout": "30"}, "timeout must be a timedelta or a number of seconds"),
        ({"timeout": 0}, "timeout must be a timedelta or a number of seconds"),
    ],
)
def test_9r4_bad_combinations_and_values_are_refused_at_decoration(options, named):
    with pytest.raises(compat.InvalidTask) as caught:
        compat.task(**options)(plain)
    assert "task tests.test_tasks_standard_names.plain: " in str(caught.value)
    assert named in str(caught.value)


def test_9r4_timeout_takes_seconds_as_int_or_float_or_a_timedelta():
    for given in (30, 30.0, timedelta(seconds=30)):
        assert compat.task(timeout=given)(plain).timeout == timedelta(seconds=30)
