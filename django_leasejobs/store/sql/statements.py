"""The pass's hot statements and the drive's reads, compiled by the ORM once per shape (SPEC §13).

Every pass sends the same few compare-and-set statements; building and
compiling each one again -- ``filter()`` -> ``add_q`` -> ``build_filter``,
``update()`` -> ``as_sql`` -- cost as much Python as the database spent
running it. So a :class:`Statement` is written as what it is, a queryset and
the values ``QuerySet.update()`` would write, with a slot where a call's own
value goes; the ORM compiles it once per database and clock, and each call
binds its values to the compiled SQL. A slot's value is adapted by the same
field method Django would use for it, so the SQL and parameters sent are
exactly those ``QuerySet.update()`` sends for the same values --
``tests/test_compiled.py`` compares them on every backend.

Where the backend can return the updated row (PostgreSQL, SQLite 3.35+), a
claim asks for it in the same statement (``RETURNING``), which spares the
pass its read-back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import Field
from django.db.models import sql as orm

from django_leasejobs.clock import get_clock
from django_leasejobs.models import Run
from django_leasejobs.querysets import RunQuerySet

from .compiled import (
    COLUMNS,
    FETCH_ALL,
    FETCH_ONE,
    ROW_COUNT,
    Compiled,
    convert,
    execute,
    returning_list,
)
from .slots import Slots

__all__ = ["Builder", "Select", "Statement"]

Builder = Callable[[RunQuerySet[Run], Slots], tuple[RunQuerySet[Run], dict[str, Any]]]


class Statement:
    """One compare-and-set ``UPDATE`` of runs, compiled once per database and clock.

    *build* returns the queryset and the values ``QuerySet.update()`` would be
    called with; *fields* says how each call value is typed (``AS_IS`` for a
    value compared or written as it is).
    """

    def __init__(self, fields: dict[str, Field[Any, Any]], build: Builder) -> None:
        self.fields = fields
        self.build = build
        # A memo shared by every thread: a race compiles one key twice, to equal values.
        self._cache: dict[tuple[str, type, bool], Compiled] = {}

    def queryset(self, using: str, **values: Any) -> tuple[RunQuerySet[Run], dict[str, Any]]:
        """The queryset and update values for *values*: what running this is the same as."""
        return self.build(Run.objects.using(using), Slots(self.fields, values))

    def run(self, using: str, **values: Any) -> int:
        """Run the statement; return how many rows it changed (1 = this caller won)."""
        return int(execute(using, self.compiled(using), values, ROW_COUNT))

    def fetch(self, using: str, **values: Any) -> Run | None:
        """Run it and return the changed run (``RETURNING``), or ``None`` if none changed.

        The row is read after the statement has run and outside its rollback
        guard (see :func:`~.compiled.execute`): a row the driver cannot convert
        raises here, yet the update stands and the caller's transaction is
        not spoiled (§12).
        """
        compiled = self.compiled(using, returning=True)
        row = execute(using, compiled, values, FETCH_ONE)
        if row is None:
            return None
        return Run.from_db(using, COLUMNS, convert(row, compiled.converters, using))

    def fetch_all(self, using: str, **values: Any) -> list[Run]:
        """Run it and return every changed run (``RETURNING``), as :meth:`fetch` one."""
        compiled = self.compiled(using, returning=True)
        rows = execute(using, compiled, values, FETCH_ALL)
        converters = compiled.converters
        return [Run.from_db(using, COLUMNS, convert(row, converters, using)) for row in rows]

    def compiled(self, using: str, *, returning: bool = False) -> Compiled:
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
                columns, converters = returning_list(using)
                sql = f"{sql} RETURNING {columns}"
            found = self._cache[key] = Compiled(sql, tuple(params), converters)
        return found


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
        # A memo shared by every thread: a race compiles one key twice, to equal values.
        self._cache: dict[tuple[Any, ...], Compiled] = {}

    def queryset(self, using: str, *shape: Any) -> Any:
        """The queryset a call with *shape* stands for."""
        return self.build(Run.objects.using(using), Slots({}, {}), *shape)

    def rows(self, using: str, *shape: Any) -> list[tuple[Any, ...]]:
        """The rows the queryset for *shape* returns, read with its compiled SQL."""
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
            compiled = Compiled(sql, tuple(params), converters, read_only=True)
            self._cache[key] = compiled
        found = execute(using, compiled, {}, FETCH_ALL)
        return [tuple(convert(row, compiled.converters, using)) for row in found]
