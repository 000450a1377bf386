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
