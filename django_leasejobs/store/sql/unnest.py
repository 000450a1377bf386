"""A batch of new runs in one statement whose parameters do not grow with it (R1, §13).

``start_many()``'s ``INSERT``, a statement the ORM cannot write (see
:mod:`django_leasejobs.store.sql`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, NamedTuple

from django.db import connections

from django_leasejobs.clock import get_clock
from django_leasejobs.models import Run

from .compiled import Compiled, returning_list, returns_rows
from .inserts import PER_CALL, RETURNED, went_in
from .slots import AS_IS, Bound, Slots

__all__ = ["Unnest"]


class _PerRow(NamedTuple):
    """Where a column's value comes from while compiling: each row's own, ``t.<name>``."""

    name: str


class _PerCall(NamedTuple):
    """Where a column's value comes from while compiling: the call's, a parameter."""

    name: str


class Unnest:
    """A batch ``INSERT`` whose parameters do not grow with the batch (``start_many``).

    An ``INSERT ... VALUES`` of a thousand runs carries 24 000 parameters for
    the driver to parse and the server to plan, and SQLite caps them at 999.
    Here the rows' own values travel as one value per column -- PostgreSQL
    arrays read by ``unnest()`` -- or as one JSON array that SQLite reads with
    ``json_each()``, whatever the batch size. Every other column is the
    store's new run (``store.base.new_run``, given here as for
    :class:`~.inserts.Insert`): a call's value, the clock's time, or a value
    adapted as Django adapts it, so the rows written are those
    :class:`~.inserts.Insert` writes (``tests/test_compiled.py`` compares
    them column by column). A taken key lets its row pass, as
    ``bulk_create(ignore_conflicts=True)`` would.

    The ORM has no ``INSERT ... SELECT``, so this statement is written here,
    from the model's own metadata: its table, columns and defaults, the
    clock's ``now`` and the ``RETURNING`` list compiled by the ORM.
    """

    #: The columns each row brings, and the array type PostgreSQL reads them as.
    PER_ROW = {
        "id": "varchar",
        "instance": "varchar",
        "payload": "text",
        "live_key": "varchar",
        "limit_key": "varchar",
    }

    def __init__(self, new_run: Callable[..., Run]) -> None:
        #: What a new run's columns are: given, as to :class:`~.inserts.Insert`.
        self.new_run = new_run
        # A memo shared by every thread: a race compiles one key twice, to equal values.
        self._cache: dict[tuple[str, type, bool, bool], Compiled] = {}

    @staticmethod
    def works(using: str) -> bool:
        """PostgreSQL; SQLite with ``RETURNING`` and JSON; not MariaDB."""
        connection = connections[using]
        if connection.vendor == "sqlite":
            return returns_rows(using) and bool(connection.features.supports_json_field)
        return connection.vendor == "postgresql"

    def compiled(self, using: str, *, notify: bool, deferred: bool) -> Compiled:
        key = (using, type(get_clock()), notify, deferred)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._compile(using, notify=notify, deferred=deferred)
        return found

    def _compile(self, using: str, *, notify: bool, deferred: bool) -> Compiled:
        connection = connections[using]
        compiler = Run.objects.using(using).all().query.get_compiler(using)
        qn = connection.ops.quote_name
        columns: list[str] = []
        select: list[str] = []
        params: list[Any] = []
        now = Slots({}, None).now
        # The new run as the store makes it, each column holding where its value
        # comes from: a row's own, the call's, the clock's time, or a value.
        run = self.new_run(
            **{name: _PerRow(name) for name in self.PER_ROW},
            **{name: _PerCall(name) for name in PER_CALL},
            at=now,
            due=_PerCall("run_after") if deferred else now,
        )
        for field in Run._meta.concrete_fields:
            columns.append(qn(field.column))  # type: ignore[arg-type]  # concrete: has a column
            value = getattr(run, field.attname)
            if isinstance(value, _PerRow):
                select.append(f"t.{value.name}")
            elif isinstance(value, _PerCall):
                select.append("%s")
                params.append(Bound(value.name, field, True))
            elif value is now:
                now_sql, now_params = compiler.compile(now)
                select.append(now_sql)
                params.extend(now_params)
            else:
                select.append("%s")
                params.append(field.get_db_prep_save(value, connection))
        names = ", ".join(self.PER_ROW)
        if connection.vendor == "postgresql":
            arrays = ", ".join(f"%s::{kind}[]" for kind in self.PER_ROW.values())
            source, verb, conflict = (
                f"unnest({arrays}) AS t({names})",
                "INSERT",
                "ON CONFLICT DO NOTHING ",
            )
            params.extend(Bound(name, AS_IS, False) for name in self.PER_ROW)
        else:
            picked = ", ".join(
                f"json_extract(value, '$[{n}]') AS {name}" for n, name in enumerate(self.PER_ROW)
            )
            source, verb, conflict = (
                f"(SELECT {picked} FROM json_each(%s)) AS t",
                "INSERT OR IGNORE",
                "",
            )
            params.append(Bound("rows", AS_IS, False))
        returned, converters = returning_list(using, RETURNED)
        sql = (
            f"{verb} INTO {qn(Run._meta.db_table)} ({', '.join(columns)}) "
            f"SELECT {', '.join(select)} FROM {source} {conflict}RETURNING {returned}"
        )
        if notify:
            # As Insert: delivered at commit, and only if a run went in (W2).
            sql = f"WITH new_run AS ({sql}) SELECT *, pg_notify(%s, '') FROM new_run"
            params.append(Bound("channel", AS_IS, False))
        return Compiled(sql, tuple(params), converters)

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
        return went_in(using, compiled, bound, values, rows)
