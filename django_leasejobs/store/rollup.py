"""The half-hours built from the minutes already flushed (SPEC §16: O1, O4; migration 0010).

From migration 0010 on, each flush adds its figures to the minutes and to
their half-hours at once (:func:`.stats.add_stats`). The minutes flushed
before that are summed into half-hours once, here: ONE ``INSERT ...
SELECT`` grouped per (half-hour, job, queue, outcome) where the backend can
place a minute in its half-hour in SQL (PostgreSQL, SQLite, MariaDB and
MySQL), else read per half-hour and written in batches.

Only readable minutes are summed (:func:`~django_leasejobs.figures.coarse.readable`):
a hand-edited minute -- text in a number's column, a negative count --
would turn the sum of its whole half-hour into a wrong figure or into an
unreadable row. It stays as it is among the minutes, where the hour window
(and the metrics view) still count it as unreadable.
"""

from __future__ import annotations

from typing import Any

from django.db import NotSupportedError, connections, transaction
from django.db.models import Func, Max, Sum

from django_leasejobs.models.observability import BUCKET_FIELDS

from .stats import half_hour_of

__all__ = ["HalfHourOf", "roll_up"]

_SUMMED = ("count", "total_seconds", *BUCKET_FIELDS)
_DIMENSIONS = ("job", "queue", "outcome")


class HalfHourOf(Func):
    """The start of the half-hour a datetime column's value is in, on the UTC grid.

    On every backend's own storage of a datetime, whatever the connection's
    time zone: seconds since the epoch on PostgreSQL (a ``timestamptz``), the
    ISO text Django writes on SQLite, a naive UTC ``DATETIME`` on MariaDB and
    MySQL.
    """

    arity = 1

    def as_sql(  # only the backends below place a datetime in its half-hour
        self, compiler: Any, connection: Any, *args: Any, **extra: Any
    ) -> Any:
        raise NotSupportedError(f"no half-hour expression on {connection.vendor}")

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        template = "to_timestamp(floor(extract(epoch from %(expressions)s) / 1800) * 1800)"
        return super().as_sql(compiler, connection, template=template, **extra)

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        # Django writes 'YYYY-MM-DD HH:MM:SS[.ffffff]': the same text, minutes :00 or :30.
        template = (
            "(strftime('%%%%Y-%%%%m-%%%%d %%%%H:', %(expressions)s) || CASE WHEN "
            "CAST(strftime('%%%%M', %(expressions)s) AS INTEGER) < 30 THEN '00' ELSE '30' END "
            "|| ':00')"
        )
        return super().as_sql(compiler, connection, template=template, **extra)

    def as_mysql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        template = (
            "(DATE_FORMAT(%(expressions)s, '%%%%Y-%%%%m-%%%%d %%%%H:00:00') "
            "+ INTERVAL (MINUTE(%(expressions)s) DIV 30) * 30 MINUTE)"
        )
        return super().as_sql(compiler, connection, template=template, **extra)


def roll_up(minutes: Any, half_hours: Any, using: str) -> int:
    """Sum the readable rows of *minutes* per half-hour into *half_hours*; return the rows written.

    *minutes* and *half_hours* are the two models (migration 0010 passes its
    historical ones); *half_hours*' table is expected empty: the sums are
    inserted, not added. One transaction.
    """
    from django_leasejobs.figures.coarse import readable  # here: figures import the store

    grouped = (
        minutes.objects.using(using)
        .filter(readable())
        .annotate(start=HalfHourOf("minute"))
        .values("start", *_DIMENSIONS)
        .annotate(
            **{f"sum_{name}": Sum(name) for name in _SUMMED},  # a group is never empty
            top_seconds=Max("max_seconds"),
        )
        .order_by()
    )
    with transaction.atomic(using=using):
        try:
            sql, params = grouped.query.sql_with_params()
        except NotSupportedError:
            return _roll_up_here(minutes, half_hours, using)
        qn = connections[using].ops.quote_name
        columns = ["half_hour", *_DIMENSIONS, *_SUMMED, "max_seconds"]
        picked = ["start", *_DIMENSIONS, *(f"sum_{name}" for name in _SUMMED), "top_seconds"]
        statement = (
            f"INSERT INTO {qn(half_hours._meta.db_table)} ({', '.join(map(qn, columns))}) "
            f"SELECT {', '.join(map(qn, picked))} FROM ({sql}) {qn('minutes')}"
        )
        with connections[using].cursor() as cursor:
            cursor.execute(statement, params)
            return int(cursor.rowcount)


def _roll_up_here(minutes: Any, half_hours: Any, using: str) -> int:
    """:func:`roll_up` for a backend without :class:`HalfHourOf`: summed here, per minute read."""
    from django_leasejobs.figures.coarse import readable  # here: figures import the store

    sums: dict[tuple[Any, ...], dict[str, Any]] = {}
    rows = minutes.objects.using(using).filter(readable()).order_by()
    for row in rows.values("minute", *_DIMENSIONS, *_SUMMED, "max_seconds").iterator():
        key = (half_hour_of(row["minute"]), *(row[name] for name in _DIMENSIONS))
        found = sums.setdefault(key, dict.fromkeys(_SUMMED, 0) | {"max_seconds": 0.0})
        for name in _SUMMED:
            found[name] += row[name]
        found["max_seconds"] = max(found["max_seconds"], row["max_seconds"])
    made = [
        half_hours(half_hour=key[0], **dict(zip(_DIMENSIONS, key[1:], strict=True)), **figures)
        for key, figures in sums.items()
    ]
    half_hours.objects.using(using).bulk_create(made, batch_size=500)
    return len(made)
