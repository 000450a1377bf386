"""Small helpers shared by the tests."""

from __future__ import annotations

_CONTROL = ("SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO SAVEPOINT", "BEGIN", "COMMIT")


def statements(captured) -> list[str]:
    """The data statements a ``CaptureQueriesContext`` saw, transaction control left out.

    (MySQL logs a statement that failed as ``None``; it still went to the server.)
    """
    return [
        query["sql"]
        for query in captured.captured_queries
        if not query["sql"].upper().startswith(_CONTROL)
    ]


def fresh(obj):
    """*obj* (a run, a step, a schedule) as the database holds it now."""
    return type(obj).objects.get(pk=obj.pk)


def until(predicate, seconds: float, every: float = 0.05) -> bool:
    """Poll *predicate* until it holds or *seconds* pass; whether it held (one last look)."""
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return bool(predicate())


def stop_worker(worker, timeout: float = 60) -> tuple[str, str]:
    """SIGTERM a worker process, wait for it; its output. A worker that fails to stop fails."""
    import signal

    worker.send_signal(signal.SIGTERM)
    out, err = worker.communicate(timeout=timeout)
    assert worker.returncode == 0, err
    return out, err


def wait_for(condition, what: str, seconds: float = 60, *, every: float = 0.05, worker=None):
    """Poll *condition* until it is true and return it; fail naming *what* after *seconds*.

    With a *worker* process, fail at once if it exits meanwhile, showing its output.
    """
    import time

    deadline = time.monotonic() + seconds
    while not (found := condition()):
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        if worker is not None:
            assert worker.poll() is None, worker.communicate()
        time.sleep(every)
    return found


def at(hour: int, minute: int = 0, day: int = 1):
    """A moment of March 2026, UTC: what the schedule tests set the frozen clock to."""
    from datetime import UTC, datetime

    return datetime(2026, 3, day, hour, minute, tzinfo=UTC)


def nightly(define, name: str):
    """A job scheduled at 03:00 Paris time, its Schedule row made by one drive (S1)."""
    from django_leasejobs import run_due_jobs
    from django_leasejobs.models import Schedule

    define(name, lambda p: p.done(), schedule="0 3 * * *", timezone="Europe/Paris")
    run_due_jobs(jobs=[name])
    return Schedule.objects.get(job=name)
