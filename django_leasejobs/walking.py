"""A walk over a QuerySet in primary-key order, one batch a pass (SPEC §3, ``p.walk``).

The run's cursor is the primary key of the last row done (``None``: from
the start). Each pass reads the next batch after it in one ``SELECT`` and
hands the batch to the caller's function as the step ``walk:<first pk>``,
so a batch done before a crash is not done again (R5). The step's stored
result -- the batch's last key and its length -- is what the pass goes on
from, on the first call as on a replay: were rows added to the batch's
range since it was done, the cursor still moves exactly past the rows that
were done, no further.

:class:`~django_leasejobs.Pass` composes these pieces in ``p.walk()``; what
this module knows is the queryset, its key and the batch, not the pass.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypedDict, TypeVar

from django.core.exceptions import ValidationError
from django.db.models import CompositePrimaryKey, Field, Model, QuerySet

from .models import STEP_NAME_LENGTH

__all__ = ["Walk", "Walked"]

M = TypeVar("M", bound=Model)

#: The step of a batch whose first key is longer than this is named by a prefix of
#: the key and a digest of the whole (a ``CharField`` key may be longer than a step name).
_KEY_SHOWN = 150


class Walked(TypedDict):
    """What a batch's step stores: where the walk goes on from, and how many rows it did."""

    last: int | str
    walked: int


@dataclass(frozen=True, slots=True)
class Walk(Generic[M]):
    """A queryset checked for walking, and its batch size."""

    queryset: QuerySet[M]
    size: int

    @classmethod
    def over(cls, queryset: object, size: object) -> Walk[Any]:
        """Check what ``p.walk()`` was given; refuse it with a clear error, reading nothing.

        Raises :class:`TypeError` for something that is not a model ``QuerySet``
        of instances, or a *size* that is not an int; :class:`ValueError` for a
        *size* below 1, a sliced or combined queryset, or a composite key.
        """
        if not isinstance(queryset, QuerySet):
            hint = " (a manager: pass .all() or a filter of it)" if hasattr(queryset, "all") else ""
            raise TypeError(f"walk() takes a QuerySet, got {type(queryset).__name__}{hint}")
        if isinstance(size, bool) or not isinstance(size, int):
            raise TypeError(f"walk() takes size= as an int of at least 1, got {size!r}")
        if size < 1:
            raise ValueError(f"walk() takes size= as an int of at least 1, got {size!r}")
        query = queryset.query
        if query.is_sliced:
            # A slice would bound each batch's read, not the walk: rows past it are never reached.
            raise ValueError(
                "walk() reads its own batches in primary-key order and cannot walk a sliced "
                "QuerySet ([a:b]); narrow it with filter() instead (e.g. pk__lte=...)"
            )
        if query.combinator:
            raise ValueError(f"walk() cannot walk a combined QuerySet ({query.combinator}())")
        if query.values_select:
            raise ValueError(
                "walk() hands model instances to its function; walk the QuerySet without "
                "values() / values_list()"
            )
        if isinstance(queryset.model._meta.pk, CompositePrimaryKey):
            raise ValueError(
                f"walk() follows one primary-key column; {queryset.model.__name__} has a "
                "composite primary key"
            )
        return cls(queryset, size)

    @property
    def key(self) -> Field[Any, Any]:
        """The primary-key field: the walk's order, and what its cursor is read back as."""
        pk = self.queryset.model._meta.pk
        assert pk is not None  # every concrete model has one
        return pk

    def batch_after(self, cursor: Any) -> list[M]:
        """The next at most ``size`` rows after *cursor* in key order: one ``SELECT``.

        The queryset's own ordering gives way to the key's; its database is its own
        (``using()``, or the router's read database for the model).
        """
        rows = self.queryset.order_by("pk")
        if cursor is not None:
            rows = rows.filter(pk__gt=self.read_cursor(cursor))
        return list(rows[: self.size])

    def read_cursor(self, cursor: Any) -> Any:
        """The cursor as the key's own type (a UUID is stored as text)."""
        try:
            return self.key.to_python(cursor)
        except ValidationError:
            raise ValueError(
                f"the run's cursor is not a primary key of {self.queryset.model.__name__} "
                f"(a {type(cursor).__name__}): was the run started by another job?"
            ) from None

    def stored_cursor(self, pk: Any) -> int | str:
        """*pk* as the cursor stores it: an int or a str as they are, any other key as text."""
        if isinstance(pk, int | str) and not isinstance(pk, bool):
            return pk
        text = str(pk)
        if self.key.to_python(text) != pk:
            raise TypeError(
                f"walk() cannot store a {type(pk).__name__} primary key of "
                f"{self.queryset.model.__name__} as a cursor: its text does not read back as it"
            )
        return text

    def step_name(self, first: Model) -> str:
        """``walk:<first pk of the batch>``: the step that does the batch (R5)."""
        text = str(self.stored_cursor(first.pk))
        if len(text) > _KEY_SHOWN:
            digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
            text = f"{text[:_KEY_SHOWN]}…{digest}"
        name = f"walk:{text}"
        assert len(name) <= STEP_NAME_LENGTH
        return name

    def do(self, batch: list[M], fn: Callable[[list[M]], object]) -> Walked:
        """Call *fn* on *batch*; what its step stores (its return value is not kept)."""
        done: Walked = {"last": self.stored_cursor(batch[-1].pk), "walked": len(batch)}
        fn(batch)
        return done
