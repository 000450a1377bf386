"""Connection-light passes on Django's own connection pool (SPEC §13, W5).

With ``DATABASES[alias]["OPTIONS"]["pool"]`` (Django's psycopg pool:
PostgreSQL, Django 5.1 or later), a thread borrows a connection from the
pool when it first sends a query and puts it back when it closes it. Without
a pool each pass thread keeps its connection from one pass to the next (W5:
N + 2 per process), which is what makes a short pass cheap. With one, a
thread that kept its connection would keep one of the pool's few through
its handler's wait on a slow upstream -- and past the pool's size, the
other threads would wait for a connection that never comes back.

So with a pool, a pass thread puts its connection back as soon as its own
statements are done (:func:`put_back`): once its pass has begun, before
the handler runs; after each step's record; after the pass's outcome. A
heartbeat puts its connection back after each renewal. The handler's own
ORM use borrows as Django's does, and goes back at the next of those. A
connection inside a transaction -- the handler's own ``atomic()`` -- is
kept: it is the transaction. Without a pool, :func:`put_back` does nothing.
"""

from __future__ import annotations

from typing import Any

from django.db import connections

__all__ = ["put_back", "unpooled"]


def put_back() -> None:
    """Put this thread's pooled connections back into Django's pools.

    A connection inside a transaction is kept, and so is one of an alias
    without a pool: it stays with its thread (W5), as Django keeps it.
    """
    for connection in connections.all(initialized_only=True):
        if (
            connection.connection is not None
            and not connection.in_atomic_block
            and connection.settings_dict["OPTIONS"].get("pool")
        ):
            connection.close()


def unpooled(settings: dict[str, Any]) -> dict[str, Any]:
    """*settings* for a connection of its own, outside the alias's pool.

    For the W2 listener: a ``LISTEN`` belongs to its session, which a pool
    would hand to other threads.
    """
    options = dict(settings.get("OPTIONS", {}))
    options.pop("pool", None)
    return {**settings, "OPTIONS": options}
