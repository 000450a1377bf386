"""The pass's hot statements, compiled by the ORM once per shape and run again (SPEC §13).

Every pass sends the same few compare-and-set statements; building and
compiling each one again -- ``filter()`` -> ``add_q`` -> ``build_filter``,
``update()`` -> ``as_sql`` -- cost as much Python as the database spent
running it. So a :class:`Statement` is written as what it is, a queryset and
the values ``QuerySet.update()`` would write, with a :class:`Slot` where a
call's own value goes; the ORM compiles it once per database and clock, and
each call binds its values to the compiled SQL. A slot's value is adapted by
the same field method Django would use for it, so the SQL and parameters
sent are exactly those ``QuerySet.update()`` sends for the same values --
``tests/test_compiled.py`` compares them on every backend.

Where the backend can return the updated row (PostgreSQL, SQLite 3.35+), a
claim asks for it in the same statement (``RETURNING``), which spares the
pass its read-back. New runs go in through :mod:`.inserts`; a step's record
rides in its renewal through :mod:`.carried`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.db.models import DateTimeField, Field
from django.db.models import sql as orm
from django.db.models.expressions import Value
from django.db.models.sql.compiler import SQLCompiler

from django_leasejobs.clock import DatabaseClock, get_clock
from django_leasejobs.models import Run
from django_leasejobs.querysets import RunQuerySet

from . import prepared

__all__ = [
    "AS_IS",
    "KEY",
    "Select",
    "Slot",
    "Slots",
    "Statement",
    "returns_rows",
]

#: The type of a slot whose value is written as it is (a str, an int, ``None``):
#: a plain ``Field`` prepares such a value by returning it, so binding skips the call.
AS_IS: Field[Any, Any] = Field()
#: The type of a slot holding a str that is compared (``pk=``, ``lease_owner=``).
KEY: Field[Any, Any] = Field()


class _Key(str):
    """A :data:`KEY` slot while compiling: a str, so the ORM binds it as the plain value it is.

    A lookup wraps an expression on its right in parentheses (``= (%s)``)
    where it writes a plain value bare (``= %s``); a str that names its slot
    passes through the char fields' preparation untouched, so the compiled
    statement is character for character the one ``QuerySet.update()``
    sends for the same str.
    """

    __slots__ = ()

    @property
    def name(self) -> str:
        return str(self)


class _Bound(NamedTuple):
    """Where a slot's value goes among a compiled statement's parameters, and how it is adapted."""

    name: str
    field: Field[Any, Any]
    for_save: bool

    def adapt(self, value: Any, connection: BaseDatabaseWrapper) -> Any:
        """*value* as ``Value(value, output_field=field)`` would pass it (or a plain value)."""
        if self.for_save:
            return self.field.get_db_prep_save(value, connection=connection)
        return self.field.get_db_prep_value(value, connection=connection)


class Slot(Value):
    """A parameter of a compiled statement: compiled as ``%s``, bound when the statement runs.

    A :class:`~django.db.models.Value` (whose value comes later), so the ORM
    places it exactly where it places the value it stands for -- a lookup
    writes a ``Value`` bare, ``= %s``, as it writes a plain value.
    """

    def __init__(self, name: str, output_field: Field[Any, Any]) -> None:
        super().__init__(None, output_field=output_field)
        self.name = name

    def as_sql(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper) -> Any:
        # Value.resolve_expression() has set for_save where the value is written.
        return "%s", [_Bound(self.name, self.output_field, self.for_save)]


class Slots:
    """Where a statement's builder writes a call's values.

    To compile, each is a :class:`Slot`; for the equivalence test, each is the
    call's concrete value, as ``QuerySet.update()`` would be given it. ``now``
    is the clock's: the database's own (no parameter), or a test clock's time.
    """

    def __init__(self, fields: dict[str, Field[Any, Any]], values: dict[str, Any] | None) -> None:
        self._fields, self._values = fields, values

    def __getattr__(self, name: str) -> Any:
        clock = get_clock()
        if name == "now" and (self._values is not None or isinstance(clock, DatabaseClock)):
            return clock.now_expr()
        field = DateTimeField() if name == "now" else self._fields[name]
        if self._values is None:
            return _Key(name) if field is KEY else Slot(name, field)
        value = self._values[name]
        return value if field is AS_IS or field is KEY else Value(value, output_field=field)


class _Compiled(NamedTuple):
    sql: str
    params: tuple[Any, ...]
    #: The converters Django applies to a whole run read back (``RETURNING``).
    converters: tuple[Any, ...]

    def bind(self, values: dict[str, Any], connection: BaseDatabaseWrapper) -> list[Any]:
        return [
            (
                values[param.name]
                if param.field is AS_IS
                else param.adapt(values[param.name], connection)
            )
            if isinstance(param, _Bound)
            else values[param.name]
            if isinstance(param, _Key)
            else param
            for param in self.params
        ]


Builder = Callable[[RunQuerySet, Slots], tuple[RunQuerySet, dict[str, Any]]]


class Statement:
    """One compare-and-set ``UPDATE`` of runs, compiled once per database and clock.

    *build* returns the queryset and the values ``QuerySet.update()`` would be
    called with; *fields* says how each call value is typed (``AS_IS`` for a
    value compared or written as it is).
    """

    def __init__(self, fields: dict[str, Field[Any, Any]], build: Builder) -> None:
        self.fields = fields
        self.build = build
        self._cache: dict[tuple[str, type, bool], _Compiled] = {}

    def queryset(self, using: str, **values: Any) -> tuple[RunQuerySet, dict[str, Any]]:
        """The queryset and update values for *values*: what running this is the same as."""
        return self.build(Run.objects.using(using), Slots(self.fields, values))

    def run(self, using: str, **values: Any) -> int:
        """Run the statement; return how many rows it changed (1 = this caller won)."""
        with self._executed(using, returning=False, values=values) as cursor:
            return int(cursor.rowcount)

    def fetch(self, using: str, **values: Any) -> Run | None:
        """Run it and return the changed run (``RETURNING``), or ``None`` if none changed.

        The row is read after the statement has run and outside its rollback
        guard: a row the driver cannot convert (SQLite text that is not UTF-8,
        a PostgreSQL time past year 9999) raises here, yet the update stands
        and the caller's transaction is not spoiled (§12).
        """
        with self._executed(using, returning=True, values=values) as cursor:
            row = cursor.fetchone()  # outside the rollback guard (see _executed)
        if row is None:
            return None
        converters = self.compiled(using, returning=True).converters
        return Run.from_db(using, _COLUMNS, _convert(row, converters, using))

    def fetch_all(self, using: str, **values: Any) -> list[Run]:
        """Run it and return every changed run (``RETURNING``), as :meth:`fetch` one."""
        with self._executed(using, returning=True, values=values) as cursor:
            rows = cursor.fetchall()  # outside the rollback guard, as in fetch()
        converters = self.compiled(using, returning=True).converters
        return [Run.from_db(using, _COLUMNS, _convert(row, converters, using)) for row in rows]

    def compiled(self, using: str, *, returning: bool = False) -> _Compiled:
        """The statement's SQL and parameters (slots in place), compiled on first use."""
        key = (using, type(get_clock()), returning)
        found = self._cache.get(key)
        if found is None:
            queryset, values = self.build(Run.objects.using(using), Slots(self.fields, None))
            query: Any = queryset.query.chain(orm.UpdateQuery)
            query.add_update_values(values)
            sql, params = query.get_compiler(using).as_sql()
            converters: tuple[Any, ...] = ()
            if returning:
                columns, converters = _returning(using)
                sql = f"{sql} RETURNING {columns}"
            found = self._cache[key] = _Compiled(sql, tuple(params), converters)
        return found

    @contextmanager
    def _executed(
        self, using: str, *, returning: bool, values: dict[str, Any]
    ) -> Iterator[CursorWrapper]:
        compiled = self.compiled(using, returning=returning)
        clock = get_clock()
        if not isinstance(clock, DatabaseClock):
            values = {**values, "now": clock.now(using)}
        connection = connections[using]
        cursor = prepared.cursor(connection)
        try:
            # As QuerySet.update(): a failed statement in a transaction marks it for rollback.
            with transaction.mark_for_rollback_on_error(using=using):
                cursor.execute(compiled.sql, compiled.bind(values, connection))
            yield cursor
        finally:
            cursor.close()


#: The run's columns in the order its SELECT reads them (and RETURNING returns them).
_COLUMNS = [field.attname for field in Run._meta.concrete_fields]
_RETURNING: dict[tuple[str, tuple[str, ...] | None], tuple[str, tuple[Any, ...]]] = {}


def _returning(using: str, only: tuple[str, ...] | None = None) -> tuple[str, tuple[Any, ...]]:
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


def _convert(row: tuple[Any, ...], converters: tuple[Any, ...], using: str) -> list[Any]:
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


class Select:
    """A read every drive sends, compiled by the ORM once per database, clock and shape.

    *build* returns the ``values_list()`` queryset for a shape -- its constant
    parts, such as the job names and the row limit -- with ``s.now`` for the
    clock's time, the only value bound per call. The rows come back through
    the converters Django applies to that queryset, so they are what
    iterating it returns (``tests/test_compiled.py`` compares the two).
    """

    #: Shapes kept per read; the job names of a process's drives rarely vary.
    SHAPES_MAX = 64

    def __init__(self, build: Callable[..., Any]) -> None:
        self.build = build
        self._cache: dict[tuple[Any, ...], _Compiled] = {}

    def queryset(self, using: str, *shape: Any) -> Any:
        """The queryset a call with *shape* stands for."""
        return self.build(Run.objects.using(using), Slots({}, {}), *shape)

    def rows(self, using: str, *shape: Any) -> list[tuple[Any, ...]]:
        key = (using, type(get_clock()), shape)
        compiled = self._cache.get(key)
        if compiled is None:
            if len(self._cache) >= self.SHAPES_MAX:
                self._cache.clear()
            queryset = self.build(Run.objects.using(using), Slots({}, None), *shape)
            compiler = queryset.query.get_compiler(using)
            sql, params = compiler.as_sql()
            fields = [column for column, _sql, _alias in compiler.select[: compiler.col_count]]
            converters = tuple(compiler.get_converters(fields).items())
            compiled = self._cache[key] = _Compiled(sql, tuple(params), converters)
        clock = get_clock()
        values = {} if isinstance(clock, DatabaseClock) else {"now": clock.now(using)}
        connection = connections[using]
        with connection.cursor() as cursor:
            cursor.execute(compiled.sql, compiled.bind(values, connection))
            found = cursor.fetchall()
        return [tuple(_convert(row, compiled.converters, using)) for row in found]
