"""Statements that wait a moment for a lock, not for as long as the lock lasts (SPEC F11).

A migration, a ``CREATE INDEX``, a ``VACUUM FULL`` or an operator's ``LOCK
TABLE`` on one of the app's side tables (the statistics, the schedules, flow
control's slots and rate state) must delay only what needs that table --
never the drive, and with it every pass, for as long as it lasts. So what a
drive does to a side table on its own account (the statistics flush, the
schedules' phase, the hourly prune) gives up after :data:`LOCK_TIMEOUT`; it
is done again at the next drive or flush.

On PostgreSQL a ``lock_timeout``; on MariaDB and MySQL ``lock_wait_timeout``
(a table's metadata lock) and ``innodb_lock_wait_timeout`` (its rows), which
count whole seconds. SQLite has no table locks: a writer there holds the
whole database, which every pass waits for anyway.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connections

__all__ = ["LOCK_TIMEOUT", "lock_wait_bounded"]

#: How long a side table's statement waits for a lock, in seconds (F11); whole
#: seconds on MariaDB and MySQL, so 1 there.
LOCK_TIMEOUT = 0.5


@contextmanager
def lock_wait_bounded(using: str) -> Iterator[None]:
    """Statements on *using*'s connection in this block wait at most :data:`LOCK_TIMEOUT`
    for a lock, each in whatever transactions it makes: the session's setting, put back
    afterwards (two statements, three on MariaDB).

    Inside the caller's transaction it changes nothing: a lock refused there
    would abort the caller's transaction, so the block waits as the caller would.
    """
    connection = connections[using]
    if connection.vendor not in ("postgresql", "mysql") or connection.in_atomic_block:
        yield
        return
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"SET lock_timeout = '{round(LOCK_TIMEOUT * 1000)}ms'")
            restore = "RESET lock_timeout"
        else:
            cursor.execute("SELECT @@SESSION.lock_wait_timeout, @@SESSION.innodb_lock_wait_timeout")
            metadata, rows = cursor.fetchone()
            wait = max(1, round(LOCK_TIMEOUT))
            cursor.execute(f"SET SESSION lock_wait_timeout={wait}, innodb_lock_wait_timeout={wait}")
            restore = (
                f"SET SESSION lock_wait_timeout={int(metadata)}, "
                f"innodb_lock_wait_timeout={int(rows)}"
            )
    try:
        yield
    finally:
        if connection.is_usable():
            with connection.cursor() as cursor:
                cursor.execute(restore)
