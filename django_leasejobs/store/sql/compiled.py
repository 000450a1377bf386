"""A compiled statement, the one place it is sent, and the runs it reads back (SPEC §13)."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from django_leasejobs.clock import DatabaseClock, get_clock
from django_leasejobs.models import Run

from . import prepared
from .slots import AS_IS, Bound, Key

__all__ = [
    "COLUMNS",
    "FETCH_ALL",
    "FETCH_ONE",
    "ROW_COUNT",
    "Compiled",
    "convert",
    "execute",
    "returning_list",
    "returns_rows",
]

R = TypeVar("R")


class Compiled(NamedTuple):
    """A statement's SQL and parameters as the ORM compiled them, its slots in place."""

    sql: str
    #: Constants, and a :class:`~.slots.Bound` or :class:`~.slots.Key` where a call's value goes.
    params: tuple[Any, ...]
    #: The converters Django applies to the rows read back (``RETURNING``, a read's columns).
    converters: tuple[Any, ...] = ()
    #: A read (:class:`~.statements.Select`), sent as iterating its queryset sends it.
    read_only: bool = False

    def bind(self, values: dict[str, Any], connection: BaseDatabaseWrapper) -> list[Any]:
        """The parameters to send: each slot's value from *values*, adapted as Django would."""
        return [
            (
                values[param.name]
                if param.field is AS_IS
                else param.adapt(values[param.name], connection)
            )
            if isinstance(param, Bound)
            else values[param.name]
            if isinstance(param, Key)
            else param
            for param in self.params
        ]


#: What a caller reads from the cursor its statement ran on (see :func:`execute`).
ROW_COUNT: Callable[[CursorWrapper], int] = operator.attrgetter("rowcount")
FETCH_ONE: Callable[[CursorWrapper], Any] = operator.methodcaller("fetchone")
FETCH_ALL: Callable[[CursorWrapper], list[Any]] = operator.methodcaller("fetchall")


def execute(
    using: str, compiled: Compiled, values: dict[str, Any], read: Callable[[CursorWrapper], R]
) -> R:
    """Send *compiled* on *using* with *values* bound; return what *read* reads from the cursor.

    The one place a compiled statement runs. ``now`` is the clock's: the
    database's own is in the SQL already, a test clock's time is bound as a
    parameter. A write goes through :func:`.prepared.cursor` and, as
    ``QuerySet.update()`` does, marks the caller's transaction for rollback
    when it fails; *read* runs after that guard, so a row the driver cannot
    convert (SQLite text that is not UTF-8, a PostgreSQL time past year 9999)
    raises to the caller while the write stands and the caller's transaction
    is not spoiled (§12). A read is sent as iterating its queryset sends it:
    on Django's own cursor, outside any guard.
    """
    clock = get_clock()
    if not isinstance(clock, DatabaseClock):
        values = {**values, "now": clock.now(using)}
    connection = connections[using]
    if compiled.read_only:
        with connection.cursor() as cursor:
            cursor.execute(compiled.sql, compiled.bind(values, connection))
            return read(cursor)
    with prepared.cursor(connection) as cursor:
        with transaction.mark_for_rollback_on_error(using=using):
            cursor.execute(compiled.sql, compiled.bind(values, connection))
        return read(cursor)


#: The run's columns in the order its SELECT reads them (and RETURNING returns them).
COLUMNS = [field.attname for field in Run._meta.concrete_fields]
#: A memo shared by every thread: a race lists one key twice, to equal values.
_RETURNING: dict[tuple[str, tuple[str, ...] | None], tuple[str, tuple[Any, ...]]] = {}


def returning_list(using: str, only: tuple[str, ...] | None = None) -> tuple[str, tuple[Any, ...]]:
    """A RETURNING list of the run's columns (all, or *only*), and Django's converters for them."""
    key = (using, only)
    if key not in _RETURNING:
        queryset = Run.objects.using(using).all()
        if only is not None:
            queryset = queryset.only(*only)
        compiler = queryset.query.get_compiler(using)
        compiler.setup_query()
        columns = [col for col, _sql, _alias in compiler.select]
        listed = ", ".join(compiler.compile(col)[0] for col in columns)
        _RETURNING[key] = (listed, tuple(compiler.get_converters(columns).items()))
    return _RETURNING[key]


def convert(row: tuple[Any, ...], converters: tuple[Any, ...], using: str) -> list[Any]:
    """*row* as Django hands it back: each column through its *converters*."""
    values = list(row)
    if not converters:
        return values  # PostgreSQL's driver hands back Python values already
    connection = connections[using]
    for position, (functions, expression) in converters:
        for converter in functions:
            values[position] = converter(values[position], expression, connection)
    return values


def returns_rows(using: str) -> bool:
    """Whether ``UPDATE ... RETURNING`` works here: PostgreSQL, SQLite 3.35+; not MariaDB."""
    connection = connections[using]
    if connection.vendor == "postgresql":
        return True
    return connection.vendor == "sqlite" and bool(
        connection.features.can_return_columns_from_insert
    )
