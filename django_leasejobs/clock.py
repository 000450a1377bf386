"""The clock every lease time is read from (SPEC L1), and the seam tests use.

Workers run on many machines whose clocks disagree; the database is the one
place they all meet. So every lease time -- the due test, an expiry, the begin
margin, a renewal -- is an SQL expression the database evaluates as the
statement runs, and the worker's own clock is only used to measure how long it
has itself been waiting (``time.monotonic``).

``LEASEJOBS["CLOCK"]`` names the clock class. The default,
:class:`DatabaseClock`, is the database's own time. :class:`FrozenClock` is the
documented seam for tests: it stands still until moved, so a test can make a
lease expire without sleeping.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DateTimeField, Field, Func, Value
from django.db.models.expressions import Combinable, CombinedExpression, ExpressionWrapper
from django.db.models.sql.compiler import SQLCompiler
from django.db.models.sql.query import Query
from django.utils.dateparse import parse_datetime
from django.utils.module_loading import import_string

from .conf import conf

__all__ = [
    "Clock",
    "DatabaseClock",
    "DbNow",
    "FrozenClock",
    "get_clock",
    "now_column",
    "read_now",
]


class DbNow(Func):
    """The database's current UTC time, evaluated per statement.

    Django's ``Now()`` is ``CURRENT_TIMESTAMP(6)`` on MySQL, which is in the
    *session* time zone; Django stores UTC there, so this reads
    ``UTC_TIMESTAMP(6)`` instead. PostgreSQL uses ``STATEMENT_TIMESTAMP()``
    (not the transaction's start), SQLite millisecond UTC text (six digits).
    """

    template = "CURRENT_TIMESTAMP"
    output_field = DateTimeField()

    def as_postgresql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, Any]:
        return self.as_sql(compiler, connection, template="STATEMENT_TIMESTAMP()", **extra)

    def as_mysql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, Any]:
        return self.as_sql(compiler, connection, template="UTC_TIMESTAMP(6)", **extra)

    def as_sqlite(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, Any]:
        # Milliseconds, written with six digits as Django writes every other time
        # on SQLite (str() of a datetime): the text compares as the time does, so
        # a run made due at "now + 0" is due to a read in the same millisecond.
        template = "STRFTIME('%%%%Y-%%%%m-%%%%d %%%%H:%%%%M:%%%%f', 'NOW') || '000'"
        return self.as_sql(compiler, connection, template=template, **extra)


class Clock(Protocol):
    """What the store asks of a clock."""

    def now_expr(self) -> Combinable:
        """Return an SQL expression for "now", evaluated by the database."""

    def now(self, using: str = "default") -> datetime:
        """Return "now" as an aware Python datetime (for reports and schedules)."""


def plus(
    expression: Combinable, delta: timedelta | Combinable
) -> ExpressionWrapper[CombinedExpression]:
    """Return the SQL expression *expression* + *delta*, typed as a datetime."""
    added = delta if isinstance(delta, Combinable) else Value(delta)
    return ExpressionWrapper(expression + added, output_field=DateTimeField())


def now_column() -> ExpressionWrapper[Any]:
    """ "Now" to select beside a row's columns, as the clock gives it; :func:`read_now` reads it.

    A bare ``Field``, not a ``DateTimeField``: a frozen clock's parameter comes back
    from MySQL as text, which Django's datetime converter would refuse.
    """
    return ExpressionWrapper(get_clock().now_expr(), output_field=Field())


def read_now(value: object) -> datetime:
    """The aware datetime of a "now" the database handed back (text on SQLite)."""
    if isinstance(value, str):
        parsed = parse_datetime(value)
        if parsed is None:
            raise ValueError(f"the database returned {value!r} for the current time")
        value = parsed
    if not isinstance(value, datetime):
        raise TypeError(f"the database returned {type(value).__name__} for the current time")
    return value if value.tzinfo else value.replace(tzinfo=UTC)


class DatabaseClock:
    """The database's own clock: the production default."""

    def now_expr(self) -> Combinable:
        return DbNow()

    def now(self, using: str = "default") -> datetime:
        connection = connections[using]
        compiler = Query(None).get_compiler(connection=connection)
        sql, params = compiler.compile(DbNow())
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {sql}", params)
            (value,) = cursor.fetchone()
        return read_now(value)


class FrozenClock:
    """A clock that stands still until a test moves it (the L1 test seam).

    Enable it with ``LEASEJOBS={"CLOCK": "django_leasejobs.clock.FrozenClock"}``
    and move it with ``get_clock().set(...)`` / ``.advance(...)``. Its time is
    sent to the database as a parameter, so every guard still runs in SQL.
    """

    def __init__(self, start: datetime | None = None) -> None:
        self._lock = threading.Lock()
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)

    def set(self, when: datetime) -> None:
        if when.tzinfo is None:
            raise ValueError("FrozenClock.set() takes an aware datetime")
        with self._lock:
            self._now = when

    def advance(self, delta: timedelta) -> datetime:
        with self._lock:
            self._now += delta
            return self._now

    def now_expr(self) -> Combinable:
        return Value(self.now(), output_field=DateTimeField())

    def now(self, using: str = "default") -> datetime:
        with self._lock:
            return self._now


#: One clock per path, made on first use by whichever thread asks: under :data:`_lock`,
#: so every thread gets the same instance (a test moves the one its passes read).
_clocks: dict[str, Clock] = {}
_lock = threading.Lock()


def get_clock() -> Clock:
    """Return the clock named by ``LEASEJOBS["CLOCK"]`` (one instance per path)."""
    path = conf.CLOCK
    clock = _clocks.get(path)
    if clock is None:
        with _lock:
            clock = _clocks.get(path)
            if clock is None:
                clock = _clocks[path] = import_string(path)()
    return clock
