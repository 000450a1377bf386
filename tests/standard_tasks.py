"""The examples of Django's open proposals for retries and timeouts, as they are written.

django/new-features #142 ("Add retry / backoff API to Tasks") and #144 ("Add
timeout API for tasks"): each block below is the proposal's own example,
unchanged but for the imports it assumes. tests/test_tasks_standard_names.py
runs them on this backend (SPEC §9 revision 4). Django 6.0's ``@task`` passes
no keywords on, so they exist only on Django 6.1 and the backport.
"""

from __future__ import annotations

import time
from typing import Any

from django_leasejobs.compat import TaskResult, task
from tests.tasks import PER_TASK_OPTIONS

if PER_TASK_OPTIONS:
    # -- new-features #142 ------------------------------------------------------------------

    def linear_backoff(exception: BaseException, task_result: TaskResult) -> int | None:
        return 30

    @task(max_attempts=10, backoff=linear_backoff)
    def my_task():
        pass

    # -- new-features #144 ------------------------------------------------------------------

    @task(timeout=30)
    def long_running_task():
        time.sleep(60)  # the proposal's own words: its test moves the clock, never waits

    # -- in the proposals' style, failing so that the back-off shows ------------------------

    @task(max_attempts=10, backoff=linear_backoff)
    def my_failing_task() -> None:
        raise ConnectionError("the API is down")

    @task(max_attempts=5, backoff=lambda exc, result: 2**result.attempts)
    def exponential() -> None:
        raise ConnectionError("the API is down")

    def give_up_on_value_errors(exception: BaseException, task_result: Any) -> int | None:
        return None if isinstance(exception, ValueError) else 30

    @task(max_attempts=5, backoff=give_up_on_value_errors)
    def picky(kind: str) -> None:
        raise (ValueError if kind == "value" else ConnectionError)(f"a {kind} error")

    @task(max_attempts=3, backoff=lambda exc, result: __import__("datetime").timedelta(minutes=2))
    def in_minutes() -> None:
        raise ConnectionError("the API is down")

    @task(max_attempts=3)
    def three_attempts() -> None:
        raise ConnectionError("the API is down")

    def broken_backoff(exception: BaseException, task_result: Any) -> int | None:
        raise KeyError("no such policy")

    @task(max_attempts=3, backoff=broken_backoff)
    def backoff_raises() -> None:
        raise ConnectionError("the API is down")

    @task(max_attempts=3, backoff=lambda exc, result: "soon")
    def backoff_says_nonsense() -> None:
        raise ConnectionError("the API is down")

    #: What ``spied``'s backoff was handed: (exception, task_result) per failed attempt.
    SEEN: list[tuple[BaseException, Any]] = []

    def record_and_give_up(exception: BaseException, task_result: Any) -> int | None:
        SEEN.append((exception, task_result))
        return None

    @task(max_attempts=2, backoff=record_and_give_up)
    def spied(message: str) -> None:
        raise ValueError(message)
