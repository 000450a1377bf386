"""New runs, inserted in one statement that returns what went in (SPEC R1, §13).

:class:`Insert` is ``start()``'s: ``bulk_create(ignore_conflicts=True)``'s own
SQL, compiled once per shape, with ``RETURNING``. A row whose key is taken is
simply not returned -- the caller joins the live run instead. Where rows
cannot be returned (MariaDB), :func:`insert_ignoring` sends that same
``INSERT`` and says how many went in. A batch goes in through
:class:`~.unnest.Unnest`, which builds on what is here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.db.models import DateTimeField, Field, Model
from django.db.models import sql as orm
from django.db.models.constants import OnConflict

from django_leasejobs.clock import get_clock
from django_leasejobs.models import Run

from .compiled import (
    COLUMNS,
    FETCH_ALL,
    ROW_COUNT,
    Compiled,
    convert,
    execute,
    returning_list,
)
from .slots import AS_IS, Bound, Slots

__all__ = ["PER_CALL", "RETURNED", "Insert", "insert_ignoring", "went_in"]

#: The columns every run of one insert shares, given by the call.
PER_CALL = ("job", "origin", "queue", "priority", "trace_context")


class Insert:
    """``INSERT`` of new runs that lets a conflicting key pass, returning the rows inserted.

    Compiled by the ORM as ``bulk_create(..., ignore_conflicts=True)`` would
    send it -- ``ON CONFLICT DO NOTHING`` on PostgreSQL, ``INSERT OR
    IGNORE`` on SQLite -- once per database, clock and number of rows, with
    ``RETURNING`` added. A row whose key was taken simply is not returned:
    no error, so no savepoint, even inside a caller's transaction. Only
    where :func:`~.compiled.returns_rows` (MariaDB has no ``INSERT ... RETURNING`` of
    skipped rows, and ``INSERT IGNORE`` would swallow more than conflicts).
    """

    #: The columns a call sets per row; the rest are the model's defaults.
    PER_ROW = ("id", "instance", "payload", "live_key", "limit_key")

    def __init__(self, new_run: Callable[..., Run]) -> None:
        #: What a new run's columns are (``store.base.new_run``): given here, not
        #: imported, as this sub-package compiles what the store says and no more.
        self.new_run = new_run
        # A memo shared by every thread: a race compiles one key twice, to equal values.
        self._cache: dict[tuple[str, type, int, bool, bool], Compiled] = {}

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
        per_call = {name: getattr(s, name) for name in PER_CALL}
        return [
            self.new_run(
                **{name: getattr(s, f"{name}_{row}") for name in self.PER_ROW},
                **per_call,
                at=s.now,
                due=due,
            )
            for row in range(rows)
        ]

    def compiled(self, using: str, rows: int, *, notify: bool, deferred: bool) -> Compiled:
        key = (using, type(get_clock()), rows, notify, deferred)
        found = self._cache.get(key)
        if found is None:
            slots = Slots(self.fields(rows), None)
            query: Any = orm.InsertQuery(Run, on_conflict=OnConflict.IGNORE)
            objects = self.objects(rows, slots, deferred=deferred)
            query.insert_values(Run._meta.concrete_fields, objects)
            ((sql, params),) = query.get_compiler(using).as_sql()
            columns, converters = returning_list(using, RETURNED)
            sql = f"{sql} RETURNING {columns}"
            if notify:
                # Called for each row that went in (a taken key returns none), and
                # delivered when the transaction commits (W2). In the RETURNING
                # list rather than around it: a CTE costs the server more to plan
                # than the NOTIFY itself.
                sql = f"{sql}, pg_notify(%s, '')"
                params = (*params, Bound("channel", AS_IS, False))
            found = self._cache[key] = Compiled(sql, tuple(params), converters)
        return found

    def run(
        self, using: str, values: dict[str, Any], rows: list[Any], *, notify: bool, deferred: bool
    ) -> list[Run]:
        """Insert *rows* (each with the :attr:`PER_ROW` attributes); return those that went in."""
        compiled = self.compiled(using, len(rows), notify=notify, deferred=deferred)
        bound = dict(values)
        for number, row in enumerate(rows):
            bound |= {f"{name}_{number}": getattr(row, name) for name in self.PER_ROW}
        return went_in(using, compiled, bound, values, rows)


def insert_ignoring(using: str, objects: list[Model]) -> int:
    """MariaDB: insert *objects* as ``bulk_create(ignore_conflicts=True)`` would; how many went in.

    Its own ``INSERT IGNORE``, sent here only to learn how many rows went in.
    The caller has checked every value, so IGNORE can only skip a taken key.
    """
    query = orm.InsertQuery(Run, on_conflict=OnConflict.IGNORE)
    query.insert_values(Run._meta.concrete_fields, objects)
    return sum(
        execute(using, Compiled(sql, tuple(params)), {}, ROW_COUNT)
        for sql, params in query.get_compiler(using).as_sql()
    )


#: What an insert reads back: the rest of each new run is known before it is sent.
RETURNED = ("id", "started_at")
#: Each run column's position in a row as ``Run.from_db()`` takes it.
_POSITION = {name: number for number, name in enumerate(COLUMNS)}


def went_in(
    using: str, compiled: Compiled, bound: dict[str, Any], values: dict[str, Any], rows: list[Any]
) -> list[Run]:
    """Send *compiled*; return the runs of *rows* that went in, as a read of them would.

    Only the id and the database's start time come back (less to send, to
    convert and for the server to return); every other column is the row's
    own, the call's or the model's default -- what the INSERT wrote.
    """
    found = execute(using, compiled, bound, FETCH_ALL)
    if not found:
        return []
    inserted = {}
    for row in found:
        run_id, started = convert(row[:2], compiled.converters, using)
        inserted[run_id] = started
    template = _template(values)
    due, started_at, updated_at = _TIME_POSITIONS
    built = []
    for row in rows:
        started = inserted.get(row.id)
        if started is not None:
            columns = template.copy()
            for name, number in _PER_ROW_POSITIONS:
                columns[number] = getattr(row, name)
            columns[started_at] = columns[updated_at] = started
            if columns[due] is None:
                columns[due] = started
            built.append(Run.from_db(using, COLUMNS, columns))
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


# functools.cache is thread-safe; its list is shared, so its one caller copies it.
@functools.cache
def _defaults() -> list[Any]:
    """The model's default for each column: constants (str, int, bool, ``None``), read once.

    The primary key's is a callable, and every row brings its own id anyway.
    """
    return [None if field.primary_key else field.get_default() for field in _FIELDS]
