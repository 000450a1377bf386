"""Where a compiled statement's per-call values go: its slots (SPEC §13).

A statement's builder writes ``s.owner``, ``s.now``, ``s.lease`` where
``QuerySet.update()`` would be given a call's values. To compile, each is a
:class:`Slot` (or a :class:`Key`): the ORM writes ``%s`` where the value will
go, and the compiled parameters say which value and how it is adapted
(:class:`Bound`). For the equivalence tests, each is the call's own value.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DateTimeField, Field
from django.db.models.expressions import Value
from django.db.models.sql.compiler import SQLCompiler

from django_leasejobs.clock import DatabaseClock, get_clock

__all__ = ["AS_IS", "KEY", "Bound", "Key", "Slot", "Slots"]

#: The type of a slot whose value is written as it is (a str, an int, ``None``):
#: a plain ``Field`` prepares such a value by returning it, so binding skips the call.
AS_IS: Field[Any, Any] = Field()
#: The type of a slot holding a str that is compared (``pk=``, ``lease_owner=``).
KEY: Field[Any, Any] = Field()


class Key(str):
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


class Bound(NamedTuple):
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
        return "%s", [Bound(self.name, self.output_field, self.for_save)]


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
            return Key(name) if field is KEY else Slot(name, field)
        value = self._values[name]
        return value if field is AS_IS or field is KEY else Value(value, output_field=field)
