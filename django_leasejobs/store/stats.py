"""O1's one write: a flush of pass statistics, added to the rows already there (SPEC §16).

Every figure of a :class:`~django_leasejobs.models.PassStat` row only grows,
so a flush is an *increment*, never a read-modify-write: ONE ``INSERT`` per
chunk of rows whose conflict clause adds the new counts to an existing row
(``ON CONFLICT ... DO UPDATE`` on PostgreSQL and SQLite, ``ON DUPLICATE KEY
UPDATE`` on MariaDB and MySQL) and keeps the larger longest duration. Two
processes flushing the same keys at once each add their own; neither count
is lost. Rows are written in key order, so two flushes lock them in one
order, and a deadlock (MariaDB's gap locks) is simply run again.

This is SQL the ORM does not write: ``bulk_create(update_conflicts=True)``
sets a column to the new value, it cannot add to it.

A flush waits at most :data:`LOCK_TIMEOUT` for a lock (F11): a migration, a
``CREATE INDEX``, a ``VACUUM FULL`` or an operator's ``LOCK TABLE`` on the
statistics table must not hold the drive that flushes -- and with it every
pass -- for as long as it lasts. The statement fails instead, and its
figures wait for the next flush (:mod:`django_leasejobs.stats`). On
PostgreSQL ``SET LOCAL lock_timeout`` (this transaction only); on MariaDB
``SET STATEMENT lock_wait_timeout=1, innodb_lock_wait_timeout=1 FOR`` (the
table's metadata lock, then its rows; whole seconds); on MySQL the same
through ``SET_VAR`` hints. SQLite has no table locks: a writer there holds
the whole database, which every pass waits for anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import connections, router, transaction

from django_leasejobs.models import PassStat
from django_leasejobs.models.observability import BUCKET_FIELDS

from .base import conflicts_retried

if TYPE_CHECKING:
    from django_leasejobs.stats import Tally

__all__ = ["LOCK_TIMEOUT", "Row", "add_stats", "lock_wait_bounded"]

#: How long a flush waits for a lock on the statistics table, in seconds (F11);
#: MariaDB and MySQL count whole seconds, so there it is 1.
LOCK_TIMEOUT = 0.5

_KEY = ("minute", "job", "queue", "outcome")
_SUMMED = ("count", "total_seconds", *BUCKET_FIELDS)
_COLUMNS = (*_KEY, *_SUMMED, "max_seconds")

#: One row of a flush: its key (the minute, job, queue and outcome) and its tally.
Row = tuple[datetime, str, str, str, "Tally"]


@conflicts_retried
def add_stats(rows: list[Row]) -> None:
    """Add *rows*' counts to the statistics table, creating the rows not there yet.

    In one transaction of one statement per chunk of the backend's
    parameter limit.
    """
    using = router.db_for_write(PassStat)
    connection = connections[using]
    size = max(1, connection.ops.bulk_batch_size(list(_COLUMNS), rows) or len(rows))
    with transaction.atomic(using=using), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"SET LOCAL lock_timeout = '{round(LOCK_TIMEOUT * 1000)}ms'")
        for start in range(0, len(rows), size):
            chunk = rows[start : start + size]
            sql = _upsert(connection.vendor, connection.ops.quote_name, len(chunk))
            sql = _bounded(connection, sql)
            params: list[Any] = []
            for minute, job, queue, outcome, tally in chunk:
                params += [connection.ops.adapt_datetimefield_value(minute), job, queue, outcome]
                params += [tally.count, tally.total, *tally.buckets, tally.longest]
            cursor.execute(sql, params)


@contextmanager
def lock_wait_bounded(using: str) -> Iterator[None]:
    """Statements on *using*'s connection in this block wait at most :data:`LOCK_TIMEOUT`
    for a lock (F11), each in whatever transactions it makes: the session's setting,
    put back afterwards. For the statistics' prune (housekeeping, on the drive's path)."""
    connection = connections[using]
    if connection.vendor not in ("postgresql", "mysql"):
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


def _bounded(connection: Any, sql: str) -> str:
    """*sql* made to wait at most a second for a lock on MariaDB and MySQL (F11)."""
    if connection.vendor != "mysql":
        return sql  # PostgreSQL: SET LOCAL lock_timeout, once per transaction
    wait = max(1, round(LOCK_TIMEOUT))
    if getattr(connection, "mysql_is_mariadb", False):
        return f"SET STATEMENT lock_wait_timeout={wait}, innodb_lock_wait_timeout={wait} FOR {sql}"
    hints = f"/*+ SET_VAR(lock_wait_timeout={wait}) SET_VAR(innodb_lock_wait_timeout={wait}) */"
    return sql.replace("INSERT INTO", f"INSERT {hints} INTO", 1)


def _upsert(vendor: str, qn: Callable[[str], str], count: int) -> str:
    """The statement for *count* rows, on *vendor*'s terms (*qn* quotes a name)."""
    table = qn(PassStat._meta.db_table)
    columns = ", ".join(qn(name) for name in _COLUMNS)
    one = "(" + ", ".join(["%s"] * len(_COLUMNS)) + ")"
    values = ", ".join([one] * count)
    longest = qn("max_seconds")
    if vendor == "mysql":
        added = ", ".join(f"{qn(name)} = {qn(name)} + VALUES({qn(name)})" for name in _SUMMED)
        keep = f"{longest} = GREATEST({longest}, VALUES({longest}))"
        return (
            f"INSERT INTO {table} ({columns}) VALUES {values} "
            f"ON DUPLICATE KEY UPDATE {added}, {keep}"
        )
    key = ", ".join(qn(name) for name in _KEY)
    added = ", ".join(f"{qn(name)} = {table}.{qn(name)} + excluded.{qn(name)}" for name in _SUMMED)
    keep = (
        f"{longest} = CASE WHEN excluded.{longest} > {table}.{longest} "
        f"THEN excluded.{longest} ELSE {table}.{longest} END"
    )
    return (
        f"INSERT INTO {table} ({columns}) VALUES {values} "
        f"ON CONFLICT ({key}) DO UPDATE SET {added}, {keep}"
    )
