"""O1's one write: a flush of pass statistics, added to the rows already there (SPEC §16).

Every figure of a :class:`~django_leasejobs.models.PassStat` row only grows,
so a flush is an *increment*, never a read-modify-write: ONE ``INSERT`` per
chunk of rows whose conflict clause adds the new counts to an existing row
(``ON CONFLICT ... DO UPDATE`` on PostgreSQL and SQLite, ``ON DUPLICATE KEY
UPDATE`` on MariaDB and MySQL) and keeps the larger longest duration. Two
processes flushing the same keys at once each add their own; neither count
is lost. Rows are written in key order, so two flushes lock them in one
order, and a deadlock (MariaDB's gap locks) is simply run again.

The same transaction adds the same figures to their half-hours
(:class:`~django_leasejobs.models.PassStatHalfHour`, what the overview's day
and week read, O4): the minutes folded here per half-hour, then ONE
``INSERT`` per chunk of those, on the same terms. A flush is then one read
of the database's clock and two upserts (each one statement per chunk of
the backend's parameter limit: one, for a worker's ten seconds), and the
half-hours always hold what the minutes hold.

This is SQL the ORM does not write: ``bulk_create(update_conflicts=True)``
sets a column to the new value, it cannot add to it.

A flush waits at most :data:`~.lock_waits.LOCK_TIMEOUT` for a lock (F11): a migration, a
``CREATE INDEX``, a ``VACUUM FULL`` or an operator's ``LOCK TABLE`` on the
statistics tables must not hold the drive that flushes -- and with it every
pass -- for as long as it lasts. The statement fails instead, and its
figures wait for the next flush (:mod:`django_leasejobs.stats`). On
PostgreSQL ``SET LOCAL lock_timeout`` (this transaction only); on MariaDB
``SET STATEMENT lock_wait_timeout=1, innodb_lock_wait_timeout=1 FOR`` (the
table's metadata lock, then its rows; whole seconds); on MySQL the same
through ``SET_VAR`` hints. SQLite has no table locks: a writer there holds
the whole database, which every pass waits for anyway.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connections, router, transaction

from django_leasejobs.models import PassStat, PassStatHalfHour
from django_leasejobs.models.observability import BUCKET_FIELDS, PassFigures, Tally

from .base import conflicts_retried
from .lock_waits import LOCK_TIMEOUT

__all__ = ["HALF_HOUR", "Row", "add_stats", "half_hour_of"]


_DIMENSIONS = ("job", "queue", "outcome")
_SUMMED = ("count", "total_seconds", *BUCKET_FIELDS)
#: The columns of one row of a flush, after its time column (``minute``, ``half_hour``).
_FIGURES = (*_DIMENSIONS, *_SUMMED, "max_seconds")
#: The length of a :class:`~django_leasejobs.models.PassStatHalfHour` row's interval.
HALF_HOUR = timedelta(minutes=30)

#: One row of a flush: its key (the minute, job, queue and outcome) and its tally.
Row = tuple[datetime, str, str, str, "Tally"]


@conflicts_retried
def add_stats(rows: list[Row]) -> None:
    """Add *rows*' counts to the minutes and to their half-hours, creating the rows not there yet.

    In one transaction of one statement per chunk of the backend's
    parameter limit, for each table: the minutes first, then the
    half-hours, each in key order, so two flushes lock rows in one order.
    """
    using = router.db_for_write(PassStat)
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        if cursor.db.vendor == "postgresql":  # F11: this transaction only
            cursor.execute(f"SET LOCAL lock_timeout = '{round(LOCK_TIMEOUT * 1000)}ms'")
        _add(cursor, PassStat, "minute", rows)
        _add(cursor, PassStatHalfHour, "half_hour", _half_hours(rows))


def _bounded(connection: Any, sql: str) -> str:
    """*sql* made to wait at most a second for a lock on MariaDB and MySQL (F11)."""
    if connection.vendor != "mysql":
        return sql  # PostgreSQL: SET LOCAL lock_timeout, once per transaction
    wait = max(1, round(LOCK_TIMEOUT))
    if getattr(connection, "mysql_is_mariadb", False):
        return f"SET STATEMENT lock_wait_timeout={wait}, innodb_lock_wait_timeout={wait} FOR {sql}"
    hints = f"/*+ SET_VAR(lock_wait_timeout={wait}) SET_VAR(innodb_lock_wait_timeout={wait}) */"
    return sql.replace("INSERT INTO", f"INSERT {hints} INTO", 1)


def half_hour_of(moment: datetime) -> datetime:
    """The start of the half-hour *moment* is in, on the UTC grid (naive stays naive)."""
    epoch = _EPOCH if moment.tzinfo is not None else _EPOCH.replace(tzinfo=None)
    return epoch + (moment - epoch) // HALF_HOUR * HALF_HOUR


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _half_hours(rows: list[Row]) -> list[Row]:
    """*rows* (minutes) summed per (half-hour, job, queue, outcome), in key order.

    New tallies: the minutes' own are written as they are.
    """
    halves: dict[tuple[datetime, str, str, str], Tally] = {}
    for minute, job, queue, outcome, tally in rows:
        halves.setdefault((half_hour_of(minute), job, queue, outcome), Tally()).merge(tally)
    return [(*key, halves[key]) for key in sorted(halves)]


def _add(cursor: Any, model: type[PassFigures], moment: str, rows: list[Row]) -> None:
    """One upsert per chunk of *rows* into *model*'s table, whose time column is *moment*."""
    connection = cursor.db
    columns = (moment, *_FIGURES)
    size = max(1, connection.ops.bulk_batch_size(list(columns), rows) or len(rows))
    for start in range(0, len(rows), size):
        chunk = rows[start : start + size]
        sql = _upsert(connection.vendor, connection.ops.quote_name, model, moment, len(chunk))
        sql = _bounded(connection, sql)
        params: list[Any] = []
        for at, job, queue, outcome, tally in chunk:
            params += [connection.ops.adapt_datetimefield_value(at), job, queue, outcome]
            params += [tally.count, tally.total, *tally.buckets, tally.longest]
        cursor.execute(sql, params)


def _upsert(
    vendor: str, qn: Callable[[str], str], model: type[PassFigures], moment: str, count: int
) -> str:
    """The statement for *count* rows of *model*, on *vendor*'s terms (*qn* quotes a name)."""
    table = qn(model._meta.db_table)
    names = (moment, *_FIGURES)
    columns = ", ".join(qn(name) for name in names)
    one = "(" + ", ".join(["%s"] * len(names)) + ")"
    values = ", ".join([one] * count)
    longest = qn("max_seconds")
    if vendor == "mysql":
        added = ", ".join(f"{qn(name)} = {qn(name)} + VALUES({qn(name)})" for name in _SUMMED)
        keep = f"{longest} = GREATEST({longest}, VALUES({longest}))"
        return (
            f"INSERT INTO {table} ({columns}) VALUES {values} "
            f"ON DUPLICATE KEY UPDATE {added}, {keep}"
        )
    key = ", ".join(qn(name) for name in (moment, *_DIMENSIONS))
    added = ", ".join(f"{qn(name)} = {table}.{qn(name)} + excluded.{qn(name)}" for name in _SUMMED)
    keep = (
        f"{longest} = CASE WHEN excluded.{longest} > {table}.{longest} "
        f"THEN excluded.{longest} ELSE {table}.{longest} END"
    )
    return (
        f"INSERT INTO {table} ({columns}) VALUES {values} "
        f"ON CONFLICT ({key}) DO UPDATE SET {added}, {keep}"
    )
