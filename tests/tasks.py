"""Tasks of Django's task framework, run by the LeaseJobsBackend (SPEC §9).

Imported through :mod:`django_leasejobs.compat`, so one module serves
Django 6's ``django.tasks`` and the backport on Django 5.2.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import django

from django_leasejobs import Retry
from django_leasejobs.compat import task


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def explode(message: str = "boom") -> None:
    raise ValueError(message)


@task(queue_name="emails", priority=10)
def send_email(to: str) -> dict[str, Any]:
    return {"sent": to}


@task(takes_context=True)
def attempt_number(context: Any) -> int:
    return int(context.attempt)


@task
async def slow_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@task
def sleeper(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@task
def returns_a_set() -> Any:
    return {1, 2}


@task(takes_context=True)
def marked_nap(context: Any, naps: list[float], wake_on: int | None = None) -> int:
    """Nap between two marks of this attempt, ``start@n`` and ``end@n`` (``tests.models.Effect``).

    Attempt *n* naps ``naps[n - 1]`` seconds (the last entry for any later
    attempt); with *wake_on*, it wakes as soon as attempt *wake_on* has
    started, so a test can see one attempt begin while another still naps.
    Returns the attempt's number.
    """
    import os

    from tests.models import Effect

    attempt, run_id = int(context.attempt), context.task_result.id
    Effect.objects.create(run_id=run_id, name=f"start@{attempt}", pid=os.getpid())
    awake_at = time.monotonic() + naps[min(attempt, len(naps)) - 1]
    woken = Effect.objects.filter(run_id=run_id, name=f"start@{wake_on}")
    while time.monotonic() < awake_at and not (wake_on and woken.exists()):
        time.sleep(0.05)
    Effect.objects.create(run_id=run_id, name=f"end@{attempt}", pid=os.getpid())
    return attempt


# -- added for the backend's tests, tests/test_tasks_*.py ------------------------------------


@task
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """Hand back the call as the task received it (args/kwargs round-trip)."""
    return {"args": list(args), "kwargs": kwargs}


@task(takes_context=True)
def flaky(context: Any) -> int:
    """Fail the first attempt, succeed on the next: the attempt number it succeeded on."""
    if context.attempt < 2:
        raise ValueError(f"attempt {context.attempt} fails")
    return int(context.attempt)


@task(takes_context=True)
def own_status(context: Any) -> dict[str, str]:
    """Read this task's own result from inside its pass (SPEC §9: RUNNING while begun)."""
    from django_leasejobs import compat

    result = context.task_result
    seen = compat.task_backends[result.backend].get_result(result.id)
    return {"context": str(result.status), "read": str(seen.status)}


#: Per-task options ride on ``@task(...)`` keywords, which Django 6.1 and the
#: backport pass to the backend's ``task_class``; Django 6.0's ``@task`` takes none.
PER_TASK_OPTIONS = django.VERSION[:2] != (6, 0)

if PER_TASK_OPTIONS:

    @task(retry=Retry(max_attempts=2, base=timedelta(0), cap=timedelta(0)))
    def retried_by_its_own_policy() -> None:
        raise ValueError("fails every time")

    @task(safe_to_repeat=False)
    def not_safe_to_repeat() -> str:
        return "ran"

    @task(timeout=timedelta(milliseconds=100))
    def hurried(seconds: float) -> float:
        time.sleep(seconds)
        return seconds


@task
def exits() -> None:
    """A ``BaseException`` that is not an ``Exception``: still a failed task (SPEC §9)."""
    raise SystemExit(3)


@task
def returns_a_tuple() -> Any:
    return (1, [2, 3])


@task
def returns_bytes() -> Any:
    return b"caf\xc3\xa9"


@task
def returns_nan() -> Any:
    return {"ratio": float("nan")}


@task(takes_context=True)
def cancelled_mid_call(context: Any) -> str:
    """An operator cancels this task while it runs: its return value must not be stored."""
    from django_leasejobs import cancel

    cancel(context.task_result.id, by="ops")
    return "finished anyway"


# -- added for tests/test_tasks_failures.py and test_tasks_config.py -------------------------


@task
def returns_text(length: int) -> str:
    """A return value of *length* characters: past a small ``VALUE_MAX_BYTES``, refused (R2)."""
    return "x" * length


@task
def fails_connecting(url: str) -> None:
    """Fail with a cause that quotes *url*, as a driver's connection error does (SPEC §10)."""
    try:
        raise ConnectionError(f"could not reach {url}")
    except ConnectionError as exc:
        raise RuntimeError("the report could not be sent") from exc


if PER_TASK_OPTIONS:

    @task(timeout=0.1)  # seconds, as OPTIONS["TIMEOUT"] takes them (SPEC §9)
    def hurried_in_seconds(seconds: float) -> float:
        time.sleep(seconds)
        return seconds


# -- added for tests/test_tasks_calls.py -----------------------------------------------------


@task(takes_context=True)
def compares_its_context(context: Any) -> list[str]:
    """Fail the first attempt; on a later one, name what its context's result reads otherwise.

    The context's result is built from the claimed run and its attempts, not read
    back: each field named differs from ``get_result()`` read inside the same pass.
    """
    from django_leasejobs import compat

    given = context.task_result
    if context.attempt < 2:
        raise ValueError(f"attempt {context.attempt} fails")
    read = compat.task_backends[given.backend].get_result(given.id)
    fields = ("status", "enqueued_at", "started_at", "last_attempted_at", "finished_at")
    fields += ("args", "kwargs", "backend", "worker_ids", "attempts", "task")
    differ = [name for name in fields if getattr(given, name) != getattr(read, name)]
    if [(e.exception_class_path, e.traceback) for e in given.errors] != [
        (e.exception_class_path, e.traceback) for e in read.errors
    ]:
        differ.append("errors")
    return differ
