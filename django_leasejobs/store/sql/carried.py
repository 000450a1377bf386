"""PostgreSQL: a step's record carried in its lease renewal's own statement (R5, L7, §13)."""

from __future__ import annotations

from typing import Any

from django.db.models import Field
from django.db.models import sql as orm

from django_leasejobs.clock import get_clock
from django_leasejobs.models import Step

from .compiled import FETCH_ONE, Compiled, execute
from .slots import Slots
from .statements import Statement

__all__ = ["Carried"]


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

    A new step's record is the one place where the text of Django's SQL is
    taken apart: its ``INSERT ... VALUES (...)`` is split at ``" VALUES ("``
    and sent as ``INSERT ... SELECT ... FROM renewed``, so that it inserts
    only where the renewal matched. The test rebuilds the statement the same
    way from what ``Step.objects.create()`` sends, so a Django whose INSERT
    text differs fails it rather than sending something else.
    """

    def __init__(
        self, renewal: Statement, fields: dict[str, Field[Any, Any]], *, began: bool | None = None
    ) -> None:
        self.renewal = renewal
        self.fields = fields
        #: A8, for a job not safe to repeat: ``True`` records the step as begun (before its
        #: function runs), ``False`` clears that with the attempt's record; ``None`` (any
        #: other job) writes no ``began_at`` at all.
        self.began = began
        # A memo shared by every thread: a race compiles one key twice, to equal values.
        self._cache: dict[tuple[str, type, bool], Compiled] = {}

    def compiled(self, using: str, *, exists: bool) -> Compiled:
        key = (using, type(get_clock()), exists)
        found = self._cache.get(key)
        if found is None:
            renew = self.renewal.compiled(using)
            record_sql, record_params = self._record(using, exists=exists)
            sql = (
                f"WITH renewed AS ({renew.sql} RETURNING 1), recorded AS ({record_sql}) "
                "SELECT count(*) FROM renewed"
            )
            found = self._cache[key] = Compiled(sql, (*renew.params, *record_params), ())
        return found

    def record(self, using: str, *, exists: bool, values: dict[str, Any] | None = None) -> Any:
        """The record as the ORM writes it: a queryset and its update values, or a Step."""
        s = Slots(self.fields, values)
        written = {"result": s.result, "attempts": s.attempts, "last_error": s.error}
        if self.began is not None:
            written["began_at"] = s.now if self.began else None
        if exists:
            steps = Step.objects.using(using).filter(run_id=s.run_id, name=s.name)
            return steps, {"recorded_at": s.now, **written}
        return Step(run_id=s.run_id, name=s.name, recorded_at=s.now, **written)

    def _record(self, using: str, *, exists: bool) -> tuple[str, list[Any]]:
        """The record's SQL, reading from ``renewed`` (a new step's INSERT cut at VALUES)."""
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
        # Django's own text, cut where its VALUES list starts: the one place its
        # SQL is taken apart (see the class docstring).
        head, values_list = sql.split(" VALUES (", 1)
        return f"{head} SELECT {values_list.removesuffix(')')} FROM renewed", list(params)

    def run(self, using: str, *, exists: bool, **values: Any) -> bool:
        """Renew and record; ``False`` (nothing written) when the lease is gone."""
        (renewed,) = execute(using, self.compiled(using, exists=exists), values, FETCH_ONE)
        return bool(renewed)
