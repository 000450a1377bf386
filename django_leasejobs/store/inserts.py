"""New runs, inserted in one statement that returns what went in (SPEC R1, §13).

:class:`Insert` is ``start()``'s: ``bulk_create(ignore_conflicts=True)``'s own
SQL, compiled once per shape, with ``RETURNING``. :class:`Unnest` is
``start_many()``'s: one statement whose parameters do not grow with the
batch. A row whose key is taken is simply not returned -- the caller joins
the live run instead.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from django.db import connections, transaction
from django.db.models import DateTimeField, Field
from django.db.models import sql as orm
from django.db.models.constants import OnConflict

from django_leasejobs.clock import DatabaseClock, get_clock
from django_leasejobs.models import Run

from . import prepared
from .compiled import (
    _COLUMNS,
    AS_IS,
    Slots,
    _Bound,
    _Compiled,
    _convert,
    _returning,
    returns_rows,
)

__all__ = ["PER_CALL", "Insert", "Unnest"]

#: The columns every run of one insert shares, given by the call.
PER_CALL = ("job", "origin", "queue", "priority", "trace_context")


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
    PER_ROW = ("id", "instance", "payload", "live_key", "limit_key")

    def __init__(self) -> None:
        self._cache: dict[tuple[str, type, int, bool, bool], _Compiled] = {}

    @staticmethod
    def fields(rows: int) -> dict[str, Field[Any, Any]]:
        per_row = {f"{name}_{row}": AS_IS for name in Insert.PER_ROW for row in range(rows)}
        per_call = dict.fromkeys(PER_CALL, AS_IS)
        return {**per_row, **per_call, "run_after": DateTimeField()}

    def objects(self, rows: int, s: Slots, *, deferred: bool) -> list[Run]:
        """The runs the INSERT writes: *rows* of them, slots or concrete values in place.

        Due now, or (*deferred*) at ``run_after``, never earlier.
        """
        due = s.run_after if deferred else s.now
        return [
            Run(
                job=s.job,
                origin=s.origin,
                queue=s.queue,
                priority=s.priority,
                trace_context=s.trace_context,
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
            columns, converters = _returning(using, RETURNED)
            sql = f"{sql} RETURNING {columns}"
            if notify:
                # Called for each row that went in (a taken key returns none), and
                # delivered when the transaction commits (W2). In the RETURNING
                # list rather than around it: a CTE costs the server more to plan
                # than the NOTIFY itself.
                sql = f"{sql}, pg_notify(%s, '')"
                params = (*params, _Bound("channel", AS_IS, False))
            found = self._cache[key] = _Compiled(sql, tuple(params), converters)
        return found

    def run(
        self, using: str, values: dict[str, Any], rows: list[Any], *, notify: bool, deferred: bool
    ) -> list[Run]:
        """Insert *rows* (each with the :attr:`PER_ROW` attributes); return those that went in."""
        compiled = self.compiled(using, len(rows), notify=notify, deferred=deferred)
        bound = dict(values)
        for number, row in enumerate(rows):
            bound |= {f"{name}_{number}": getattr(row, name) for name in self.PER_ROW}
        return _went_in(using, compiled, bound, values, rows)


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
    PER_ROW = {
        "id": "varchar",
        "instance": "varchar",
        "payload": "text",
        "live_key": "varchar",
        "limit_key": "varchar",
    }

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
            elif name in PER_CALL or (name == "next_attempt_at" and deferred):
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
        returned, converters = _returning(using, RETURNED)
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
        return _went_in(using, compiled, bound, values, rows)


#: What an insert reads back: the rest of each new run is known before it is sent.
RETURNED = ("id", "started_at")
#: Each run column's position in a row as ``Run.from_db()`` takes it.
_POSITION = {name: number for number, name in enumerate(_COLUMNS)}


def _went_in(
    using: str, compiled: _Compiled, bound: dict[str, Any], values: dict[str, Any], rows: list[Any]
) -> list[Run]:
    """Send *compiled*; return the runs of *rows* that went in, as a read of them would.

    Only the id and the database's start time come back (less to send, to
    convert and for the server to return); every other column is the row's
    own, the call's or the model's default -- what the INSERT wrote.
    """
    clock = get_clock()
    if not isinstance(clock, DatabaseClock):
        bound["now"] = clock.now(using)
    connection = connections[using]
    with prepared.cursor(connection) as cursor:
        with transaction.mark_for_rollback_on_error(using=using):
            cursor.execute(compiled.sql, compiled.bind(bound, connection))
        found = cursor.fetchall()
    if not found:
        return []
    went_in = {}
    for row in found:
        run_id, started = _convert(row[:2], compiled.converters, using)
        went_in[run_id] = started
    template = _template(values)
    due, started_at, updated_at = _TIME_POSITIONS
    built = []
    for row in rows:
        started = went_in.get(row.id)
        if started is not None:
            columns = template.copy()
            for name, number in _PER_ROW_POSITIONS:
                columns[number] = getattr(row, name)
            columns[started_at] = columns[updated_at] = started
            if columns[due] is None:
                columns[due] = started
            built.append(Run.from_db(using, _COLUMNS, columns))
    return built


_FIELDS = Run._meta.concrete_fields
_TIME_POSITIONS = tuple(_POSITION[name] for name in ("next_attempt_at", "started_at", "updated_at"))
_PER_ROW_POSITIONS = tuple((name, _POSITION[name]) for name in Insert.PER_ROW)


def _template(values: dict[str, Any]) -> list[Any]:
    """A new run's columns before its own: the model's defaults, then the call's values."""
    columns = _defaults().copy()
    for name in PER_CALL:
        columns[_POSITION[name]] = values[name]
    columns[_POSITION["next_attempt_at"]] = values["run_after"]
    return columns


@functools.cache
def _defaults() -> list[Any]:
    """The model's default for each column: constants (str, int, bool, ``None``), read once.

    The primary key's is a callable, and every row brings its own id anyway.
    """
    return [None if field.primary_key else field.get_default() for field in _FIELDS]
