"""Run code in real, separate worker processes against the test database.

Concurrency claims are proven with processes, each with its own connection,
released together through a barrier -- never with threads sharing one
connection. The parent test must use ``django_db(transaction=True)`` so that
what it writes is committed and visible to the children.
"""

from __future__ import annotations

import multiprocessing
import os
import traceback
from typing import Any

from django.db import connection

BARRIER_TIMEOUT = 120


def _child(target: str, db_name: str, barrier: Any, results: Any, args: tuple[Any, ...]) -> None:
    os.environ["LEASEJOBS_TEST_DB_NAME"] = db_name
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    try:
        import django

        django.setup()
        from django.db import connection as child_connection
        from django.utils.module_loading import import_string

        function = import_string(target)
        child_connection.ensure_connection()  # Connect before the barrier, not after.
        barrier.wait(BARRIER_TIMEOUT)
        results.put(("ok", os.getpid(), function(*args)))
    except BaseException:
        results.put(("error", os.getpid(), traceback.format_exc()))
    finally:
        from django.db import connections

        connections.close_all()


def run_together(target: str, processes: int, *args: Any) -> list[Any]:
    """Call the function at dotted path *target* in *processes* processes at once.

    Returns each process's return value. Fails the test with the child's
    traceback if any child raised.
    """
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(processes)
    results = context.Queue()
    children = [
        context.Process(
            target=_child, args=(target, connection.settings_dict["NAME"], barrier, results, args)
        )
        for _ in range(processes)
    ]
    for child in children:
        child.start()
    outcomes = [results.get(timeout=BARRIER_TIMEOUT * 2) for _ in children]
    for child in children:
        child.join(timeout=60)
    errors = [detail for status, _pid, detail in outcomes if status == "error"]
    assert not errors, "a worker process failed:\n" + "\n".join(errors)
    return [value for _status, _pid, value in outcomes]
