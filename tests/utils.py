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
