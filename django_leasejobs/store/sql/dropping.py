"""PostgreSQL: a commit that drops its pass's step ledger, in one statement (R3, R5, §13).

A pass that recorded steps ends by committing (R3) and dropping the
ledger those steps wrote, together: the steps were this pass's, and the
next pass must not replay them. As a transaction that is four round trips
-- BEGIN, the commit's ``UPDATE``, the ledger's ``DELETE``, COMMIT -- on
every pass of a job that takes steps: a ``p.walk()`` backfill pays them
once a batch. PostgreSQL carries the ``DELETE`` in the commit's own
statement, ``WITH committed AS (UPDATE ... RETURNING 1), dropped AS
(DELETE ... AND EXISTS (SELECT 1 FROM committed)) SELECT count(*) FROM
committed``: one round trip and one commit, as atomic as the transaction,
and the ledger dropped only where the commit's compare-and-set won. Each
half is the ORM's own SQL (the commit's :class:`Statement`;
``Step.objects.filter(run_id=...).delete()``), as ``tests/test_compiled.py``
checks. An advance that goes on to the run's next pass reads the row back
through it (``SELECT * FROM committed``), as a claim's ``RETURNING`` does.
"""

from __future__ import annotations

from typing import Any

from django.db.models import sql as orm

from django_leasejobs.clock import get_clock
from django_leasejobs.models import Run, Step

from .compiled import COLUMNS, FETCH_ONE, Compiled, convert, execute
from .slots import Key
from .statements import Statement

__all__ = ["Dropping"]


class Dropping:
    """A commit of *commit*'s shape that drops the run's step ledger where it wins."""

    def __init__(self, commit: Statement) -> None:
        self.commit = commit
        # A memo shared by every thread: a race compiles one key twice, to equal values.
        self._cache: dict[tuple[str, type, bool], Compiled] = {}

    def compiled(self, using: str, *, returning: bool = False) -> Compiled:
        """One statement; *returning*: it reads back the committed row, as a claim does."""
        key = (using, type(get_clock()), returning)
        found = self._cache.get(key)
        if found is None:
            commit = self.commit.compiled(using, returning=returning)
            drop_sql, drop_params = self.drop(using)
            committed = commit.sql if returning else f"{commit.sql} RETURNING 1"
            answer = "SELECT * FROM committed" if returning else "SELECT count(*) FROM committed"
            sql = (
                f"WITH committed AS ({committed}), "
                f"dropped AS ({drop_sql} AND EXISTS (SELECT 1 FROM committed)) {answer}"
            )
            params = (*commit.params, *drop_params)
            found = self._cache[key] = Compiled(sql, params, commit.converters)
        return found

    @staticmethod
    def drop(using: str) -> tuple[str, tuple[Any, ...]]:
        """The ledger's ``DELETE`` as ``Step.objects.filter(run_id=...).delete()`` sends it."""
        steps = Step.objects.using(using).filter(run_id=Key("run_id"))
        query: Any = steps.query.chain(orm.DeleteQuery)
        sql, params = query.get_compiler(using).as_sql()
        return sql, tuple(params)

    def run(self, using: str, **values: Any) -> bool:
        """Commit and drop; ``False`` (nothing written) when the lease is gone."""
        (committed,) = execute(using, self.compiled(using), values, FETCH_ONE)
        return bool(committed)

    def fetch(self, using: str, **values: Any) -> Run | None:
        """Commit and drop; the committed run as :meth:`.Statement.fetch` reads it, or ``None``."""
        compiled = self.compiled(using, returning=True)
        row = execute(using, compiled, values, FETCH_ONE)
        if row is None:
            return None
        return Run.from_db(using, COLUMNS, convert(row, compiled.converters, using))
