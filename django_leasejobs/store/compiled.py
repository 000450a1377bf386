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
pass its read-back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.db.models import DateTimeField, Field
from django.db.models import sql as orm
from django.db.models.constants import OnConflict
from django.db.models.expressions import Value
from django.db.models.sql.compiler import SQLCompiler

from django_leasejobs.clock import DatabaseClock, get_clock
from django_leasejobs.models import Run
from django_leasejobs.querysets import RunQuerySet

__all__ = [
    "AS_IS",
    "KEY",
    "Carried",
    "Insert",
    "Select",
    "Slot",
    "Slots",
    "Statement",
    "Unnest",
    "returns_rows",
]

#: The type of a slot whose value is written as it is (a str, an int, ``None``).
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
            param.adapt(values[param.name], connection)
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
        cursor = connection.cursor()
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


class Insert:
    """``INSERT`` of new runs that lets a conflicting key pass, returning the rows inserted.

    Compiled by the ORM as ``bulk_create(..., ignore_conflicts=True)`` would
    send it -- ``ON CONFLICT DO NOTHING`` on PostgreSQL, ``INSERT OR
    IGNORE`` on SQLite -- once per database, clock and number of rows, with
    ``RETURNING`` added. A row whose key was taken simply is not returned:
    no error, so no savepoint, even inside a caller's transaction. Only
    where :func:`returns_rows` (MariaDB has no ``INSERT ... RETURNING`` of
    skipped rows, and ``INSERT IGNORE`` would swallow more than conflicts).
    """

    #: The columns a call sets per row; the rest are the model's defaults.
    PER_ROW = ("id", "instance", "payload", "live_key")

    def __init__(self) -> None:
        self._cache: dict[tuple[str, type, int, bool, bool], _Compiled] = {}

    @staticmethod
    def fields(rows: int) -> dict[str, Field[Any, Any]]:
        per_row = {f"{name}_{row}": AS_IS for name in Insert.PER_ROW for row in range(rows)}
        return {**per_row, "job": AS_IS, "origin": AS_IS, "run_after": DateTimeField()}

    def objects(self, rows: int, s: Slots, *, deferred: bool) -> list[Run]:
        """The runs the INSERT writes: *rows* of them, slots or concrete values in place.

        Due now, or (*deferred*) at ``run_after``, never earlier.
        """
        due = s.run_after if deferred else s.now
        return [
            Run(
                job=s.job,
                origin=s.origin,
                started_at=s.now,
                updated_at=s.now,
                next_attempt_at=due,
                **{name: getattr(s, f"{name}_{row}") for name in self.PER_ROW},
            )
            for row in range(rows)
        ]

    def compiled(self, using: str, rows: int, *, notify: bool, deferred: bool) -> _Compiled:
        key = (using, type(get_clock()), rows, notify, deferred)
        found = self._cache.get(key)
        if found is None:
            slots = Slots(self.fields(rows), None)
            query: Any = orm.InsertQuery(Run, on_conflict=OnConflict.IGNORE)
            objects = self.objects(rows, slots, deferred=deferred)
            query.insert_values(Run._meta.concrete_fields, objects)
            ((sql, params),) = query.get_compiler(using).as_sql()
            columns, converters = _returning(using)
            sql = f"{sql} RETURNING {columns}"
            if notify:
                # Delivered when the transaction commits, and only if a run went in (W2).
                sql = f"WITH new_run AS ({sql}) SELECT *, pg_notify(%s, '') FROM new_run"
                params = (*params, _Bound("channel", AS_IS, False))
            found = self._cache[key] = _Compiled(sql, tuple(params), converters)
        return found

    def run(
        self, using: str, values: dict[str, Any], rows: int, *, notify: bool, deferred: bool
    ) -> list[Run]:
        """Insert *rows* runs; return those that went in (a taken key is left out)."""
        compiled = self.compiled(using, rows, notify=notify, deferred=deferred)
        clock = get_clock()
        if not isinstance(clock, DatabaseClock):
            values = {**values, "now": clock.now(using)}
        connection = connections[using]
        with connection.cursor() as cursor:
            with transaction.mark_for_rollback_on_error(using=using):
                cursor.execute(compiled.sql, compiled.bind(values, connection))
            found = cursor.fetchall()
        width = len(_COLUMNS)
        return [
            Run.from_db(using, _COLUMNS, _convert(row[:width], compiled.converters, using))
            for row in found
        ]


class Unnest:
    """A batch ``INSERT`` whose parameters do not grow with the batch (``start_many``).

    An ``INSERT ... VALUES`` of a thousand runs carries 24 000 parameters for
    the driver to parse and the server to plan, and SQLite caps them at 999.
    Here the rows' own values travel as one value per column -- PostgreSQL
    arrays read by ``unnest()`` -- or as one JSON array that SQLite reads with
    ``json_each()``, whatever the batch size. Every other column is the
    model's own: its default adapted as Django adapts it, or the clock's
    time, so the rows written are those :class:`Insert` writes
    (``tests/test_compiled.py`` compares them column by column). A taken key
    lets its row pass, as ``bulk_create(ignore_conflicts=True)`` would.
    """

    #: The columns each row brings, and the array type PostgreSQL reads them as.
    PER_ROW = {"id": "varchar", "instance": "varchar", "payload": "text", "live_key": "varchar"}

    def __init__(self) -> None:
        self._cache: dict[tuple[str, type, bool, bool], _Compiled] = {}

    @staticmethod
    def works(using: str) -> bool:
        """PostgreSQL; SQLite with ``RETURNING`` and JSON; not MariaDB."""
        connection = connections[using]
        if connection.vendor == "sqlite":
            return returns_rows(using) and bool(connection.features.supports_json_field)
        return connection.vendor == "postgresql"

    def compiled(self, using: str, *, notify: bool, deferred: bool) -> _Compiled:
        key = (using, type(get_clock()), notify, deferred)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._compile(using, notify=notify, deferred=deferred)
        return found

    def _compile(self, using: str, *, notify: bool, deferred: bool) -> _Compiled:
        connection = connections[using]
        compiler = Run.objects.using(using).all().query.get_compiler(using)
        qn = connection.ops.quote_name
        columns: list[str] = []
        select: list[str] = []
        params: list[Any] = []
        for field in Run._meta.concrete_fields:
            columns.append(qn(field.column))  # type: ignore[arg-type]  # concrete: has a column
            name = field.attname
            if name in self.PER_ROW:
                select.append(f"t.{name}")
            elif name in ("job", "origin") or (name == "next_attempt_at" and deferred):
                slot = "run_after" if name == "next_attempt_at" else name
                select.append("%s")
                params.append(_Bound(slot, field, True))
            elif name in ("started_at", "updated_at", "next_attempt_at"):
                now_sql, now_params = compiler.compile(Slots({}, None).now)
                select.append(now_sql)
                params.extend(now_params)
            else:
                select.append("%s")
                params.append(field.get_db_prep_save(field.get_default(), connection))
        names = ", ".join(self.PER_ROW)
        if connection.vendor == "postgresql":
            arrays = ", ".join(f"%s::{kind}[]" for kind in self.PER_ROW.values())
            source, verb, conflict = (
                f"unnest({arrays}) AS t({names})",
                "INSERT",
                "ON CONFLICT DO NOTHING ",
            )
            params.extend(_Bound(name, AS_IS, False) for name in self.PER_ROW)
        else:
            picked = ", ".join(
                f"json_extract(value, '$[{n}]') AS {name}" for n, name in enumerate(self.PER_ROW)
            )
            source, verb, conflict = (
                f"(SELECT {picked} FROM json_each(%s)) AS t",
                "INSERT OR IGNORE",
                "",
            )
            params.append(_Bound("rows", AS_IS, False))
        returned, converters = _returning(using, ("id", "started_at"))
        sql = (
            f"{verb} INTO {qn(Run._meta.db_table)} ({', '.join(columns)}) "
            f"SELECT {', '.join(select)} FROM {source} {conflict}RETURNING {returned}"
        )
        if notify:
            # As Insert: delivered at commit, and only if a run went in (W2).
            sql = f"WITH new_run AS ({sql}) SELECT *, pg_notify(%s, '') FROM new_run"
            params.append(_Bound("channel", AS_IS, False))
        return _Compiled(sql, tuple(params), converters)

    def run(
        self, using: str, values: dict[str, Any], rows: list[Any], *, notify: bool, deferred: bool
    ) -> list[Run]:
        """Insert *rows* (each with the :attr:`PER_ROW` attributes); return those that went in."""
        compiled = self.compiled(using, notify=notify, deferred=deferred)
        connection = connections[using]
        bound = dict(values)
        if connection.vendor == "postgresql":
            bound |= {name: [getattr(row, name) for row in rows] for name in self.PER_ROW}
        else:
            bound["rows"] = json.dumps([[getattr(row, n) for n in self.PER_ROW] for row in rows])
        clock = get_clock()
        if not isinstance(clock, DatabaseClock):
            bound["now"] = clock.now(using)
        with connection.cursor() as cursor:
            with transaction.mark_for_rollback_on_error(using=using):
                cursor.execute(compiled.sql, compiled.bind(bound, connection))
            found = cursor.fetchall()
        went_in = {}
        for row in found:
            run_id, started = _convert(row[:2], compiled.converters, using)
            went_in[run_id] = started
        runs = []
        for row in rows:
            started = went_in.get(row.id)
            if started is not None:
                run = Run(
                    id=row.id,
                    job=values["job"],
                    instance=row.instance,
                    origin=values["origin"],
                    payload=row.payload,
                    started_at=started,
                    updated_at=started,
                    next_attempt_at=values["run_after"] or started,
                    live_key=row.live_key,
                )
                run._state.adding, run._state.db = False, using
                runs.append(run)
        return runs


class Carried:
    """PostgreSQL: a write that lands only where its renewal landed, in one statement.

    A step's record (R5) must go in while the pass holds its lease, together
    with the renewal that proves it (L7). As a transaction that is four
    round trips -- BEGIN, the renewal, the record, COMMIT. PostgreSQL can
    carry the record in the renewal's own statement, ``WITH renewed AS
    (UPDATE ... RETURNING 1), recorded AS (INSERT ... SELECT ... FROM
    renewed) SELECT count(*) FROM renewed``: one round trip and one commit,
    as atomic as the transaction, with the same lock on the run's row. Each
    half is the ORM's own compiled SQL (the renewal's :class:`Statement`;
    the record's ``INSERT`` or ``UPDATE``, reading its values from the
    renewal), as ``tests/test_compiled.py`` checks.
    """

    def __init__(self, renewal: Statement, fields: dict[str, Field[Any, Any]]) -> None:
        self.renewal = renewal
        self.fields = fields
        self._cache: dict[tuple[str, type, bool], _Compiled] = {}

    def compiled(self, using: str, *, exists: bool) -> _Compiled:
        key = (using, type(get_clock()), exists)
        found = self._cache.get(key)
        if found is None:
            renew = self.renewal.compiled(using)
            record_sql, record_params = self._record(using, exists=exists)
            sql = (
                f"WITH renewed AS ({renew.sql} RETURNING 1), recorded AS ({record_sql}) "
                "SELECT count(*) FROM renewed"
            )
            found = self._cache[key] = _Compiled(sql, (*renew.params, *record_params), ())
        return found

    def record(self, using: str, *, exists: bool, values: dict[str, Any] | None = None) -> Any:
        """The record as the ORM writes it: a queryset and its update values, or a Step."""
        from django_leasejobs.models import Step

        s = Slots(self.fields, values)
        written = {"result": s.result, "attempts": s.attempts, "last_error": s.error}
        if exists:
            steps = Step.objects.using(using).filter(run_id=s.run_id, name=s.name)
            return steps, {"recorded_at": s.now, **written}
        return Step(run_id=s.run_id, name=s.name, recorded_at=s.now, **written)

    def _record(self, using: str, *, exists: bool) -> tuple[str, list[Any]]:
        from django_leasejobs.models import Step

        record = self.record(using, exists=exists)
        if exists:
            queryset, values = record
            query: Any = queryset.query.chain(orm.UpdateQuery)
            query.add_update_values(values)
            sql, params = query.get_compiler(using).as_sql()
            return f"{sql} AND EXISTS (SELECT 1 FROM renewed)", list(params)
        insert: Any = orm.InsertQuery(Step)
        fields = [f for f in Step._meta.concrete_fields if not f.primary_key]
        insert.insert_values(fields, [record])
        ((sql, params),) = insert.get_compiler(using).as_sql()
        head, values_list = sql.split(" VALUES (", 1)
        return f"{head} SELECT {values_list.removesuffix(')')} FROM renewed", list(params)

    def run(self, using: str, *, exists: bool, **values: Any) -> bool:
        """Renew and record; ``False`` (nothing written) when the lease is gone."""
        compiled = self.compiled(using, exists=exists)
        clock = get_clock()
        if not isinstance(clock, DatabaseClock):
            values = {**values, "now": clock.now(using)}
        connection = connections[using]
        with connection.cursor() as cursor, transaction.mark_for_rollback_on_error(using=using):
            cursor.execute(compiled.sql, compiled.bind(values, connection))
            (renewed,) = cursor.fetchone()
        return bool(renewed)


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
