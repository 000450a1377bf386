"""Statements that wait a moment for a lock, not for as long as the lock lasts (SPEC F11).

A migration, a ``CREATE INDEX``, a ``VACUUM FULL`` or an operator's ``LOCK
TABLE`` on one of the app's side tables (the statistics, the schedules, flow
control's slots and rate state) must delay only what needs that table --
never the drive, and with it every pass, for as long as it lasts. So what a
drive does to a side table on its own account (the statistics flush, the
schedules' phase, the hourly prune) gives up after :data:`LOCK_TIMEOUT`; it
is done again at the next drive or flush.

On PostgreSQL a ``lock_timeout`` set with ``SET LOCAL`` in each transaction
the block makes -- never for the session: behind a transaction-pooling
PgBouncer a session setting stays on the server connection that ran it,
which the pooler hands to another client next (shown with a real PgBouncer:
one client's ``SET lock_timeout`` read back by the next client's ``SHOW``).
On MariaDB and MySQL ``lock_wait_timeout`` (a table's metadata lock) and
``innodb_lock_wait_timeout`` (its rows), which count whole seconds, for the
session and put back after. SQLite has no table locks: a writer there holds
the whole database, which every pass waits for anyway.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

__all__ = ["LOCK_TIMEOUT", "lock_wait_bounded"]

#: How long a side table's statement waits for a lock, in seconds (F11); whole
#: seconds on MariaDB and MySQL, so 1 there.
LOCK_TIMEOUT = 0.5


#: PostgreSQL's bound, for the transaction it is sent in.
_SET_LOCAL = f"SET LOCAL lock_timeout = '{round(LOCK_TIMEOUT * 1000)}ms'"


@contextmanager
def lock_wait_bounded(using: str) -> Iterator[None]:
    """Statements on *using*'s connection in this block wait at most :data:`LOCK_TIMEOUT`
    for a lock, each in whatever transactions it makes.

    On PostgreSQL each transaction of the block starts with ``SET LOCAL``
    (a statement outside one is sent in a transaction of its own with it);
    on MariaDB the session's setting, put back afterwards (three statements).

    Inside the caller's transaction it changes nothing: a lock refused there
    would abort the caller's transaction, so the block waits as the caller would.
    """
    connection = connections[using]
    if connection.vendor not in ("postgresql", "mysql") or connection.in_atomic_block:
        yield
        return
    if connection.vendor == "postgresql":
        with connection.execute_wrapper(_EachTransaction(connection)):
            yield
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT @@SESSION.lock_wait_timeout, @@SESSION.innodb_lock_wait_timeout")
        metadata, rows = cursor.fetchone()
        wait = max(1, round(LOCK_TIMEOUT))
        cursor.execute(f"SET SESSION lock_wait_timeout={wait}, innodb_lock_wait_timeout={wait}")
    try:
        yield
    finally:
        if connection.is_usable():
            with connection.cursor() as cursor:
                cursor.execute(
                    f"SET SESSION lock_wait_timeout={int(metadata)}, "
                    f"innodb_lock_wait_timeout={int(rows)}"
                )


class _EachTransaction:
    """An execute wrapper: every transaction its statements run in starts bounded (PostgreSQL).

    A statement in autocommit gets a transaction of its own, ``SET LOCAL``
    first; the first statement of a transaction the block opened (an
    ``atomic()``) is preceded by one. Its own ``SET LOCAL`` passes through.
    """

    def __init__(self, connection: BaseDatabaseWrapper) -> None:
        self._connection = connection
        self._bounded: object = None  # the outermost atomic block already bounded
        self._inside = False

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if self._inside:
            return execute(sql, params, many, context)
        connection = self._connection
        self._inside = True
        try:
            if not connection.in_atomic_block:
                if not connection.get_autocommit():
                    return execute(sql, params, many, context)  # the caller's own transaction
                with transaction.atomic(using=connection.alias):
                    self._bound()
                    return execute(sql, params, many, context)
            outermost = connection.atomic_blocks[0]
            if outermost is not self._bounded:
                self._bound()
                self._bounded = outermost
            return execute(sql, params, many, context)
        finally:
            self._inside = False

    def _bound(self) -> None:
        with self._connection.cursor() as cursor:
            cursor.execute(_SET_LOCAL)
