"""PostgreSQL: two runs' compare-and-set UPDATEs in one statement, one commit (§13)."""

from __future__ import annotations

from typing import Any

from django_leasejobs.clock import get_clock

from .compiled import FETCH_ONE, Compiled, execute
from .slots import Bound, Key
from .statements import Statement

__all__ = ["NEXT", "Paired"]

#: What the second statement's slots are called in a pair: ``next_run_id``, ``next_owner``, ...
NEXT = "next_"


class Paired:
    """PostgreSQL: *first* and *second*, each on its own run, in one round trip and one commit.

    A pass that finishes, on a drive whose next run is claimed ahead, ends
    with two writes: its own commit (R3) and the next pass's BEGIN (L4).
    Sent apart, each is a commit of its own, and each commit waits for its
    flush of the write-ahead log -- most of a short pass's time. PostgreSQL
    runs both in one statement, ``WITH first AS (UPDATE ... RETURNING 1),
    second AS (UPDATE ... RETURNING 1) SELECT (SELECT count(*) FROM first),
    (SELECT count(*) FROM second)``: one round trip, one commit, each UPDATE
    still its own compare-and-set on its own row, whose count is its answer.
    Neither reads what the other wrote, so neither depends on the other
    winning. Each half is the ORM's own compiled SQL (``tests/test_compiled.py``
    compares them); the second's slots are bound from the call's values
    named with the :data:`NEXT` prefix (``next_run_id``, ``next_owner``).
    """

    def __init__(self, first: Statement, second: Statement) -> None:
        self.first = first
        self.second = second
        # A memo shared by every thread: a race compiles one key twice, to equal values.
        self._cache: dict[tuple[str, type], Compiled] = {}

    def compiled(self, using: str) -> Compiled:
        key = (using, type(get_clock()))
        found = self._cache.get(key)
        if found is None:
            first, second = self.first.compiled(using), self.second.compiled(using)
            sql = (
                f"WITH first AS ({first.sql} RETURNING 1), "
                f"second AS ({second.sql} RETURNING 1) "
                "SELECT (SELECT count(*) FROM first), (SELECT count(*) FROM second)"
            )
            params = (*first.params, *map(_renamed, second.params))
            found = self._cache[key] = Compiled(sql, params, ())
        return found

    def run(self, using: str, **values: Any) -> tuple[int, int]:
        """Run both; return how many rows each changed (1 = that compare-and-set won)."""
        first, second = execute(using, self.compiled(using), values, FETCH_ONE)
        return int(first), int(second)


def _renamed(param: Any) -> Any:
    """The second statement's slot, bound from its :data:`NEXT`-prefixed value (``now`` shared)."""
    if isinstance(param, Key):
        return Key(NEXT + param)
    if isinstance(param, Bound) and param.name != "now":
        return param._replace(name=NEXT + param.name)
    return param
