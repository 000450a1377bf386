"""Reading rows that a database may not hand back (SPEC §12), and rows no drive will reach (§11).

A restore can leave a row whose columns the database stores but cannot
return: on SQLite text that is not UTF-8, an impossible date; on PostgreSQL
a time past year 9999. Reading one raises -- a ``DatabaseError`` or a
``ValueError`` from a converter -- and must cost only that row: the drive
fails its pass (R9), the admin and ``leasejobs_status`` show why.
"""

from __future__ import annotations

from typing import NamedTuple, TypeVar

from django.db import models

from .errors import READ_ERRORS, why_unreadable
from .models import Run

# READ_ERRORS is errors.py's; it is named here too for the admin's readers of rows.
__all__ = ["READ_ERRORS", "Unreadable", "read_robustly", "stranded"]

M = TypeVar("M", bound=models.Model)


class Unreadable(NamedTuple):
    """A row that cannot be read back: its key, which always reads, and why."""

    pk: str
    reason: str


def read_robustly(
    rows: models.QuerySet[M], within: models.QuerySet[M] | None = None
) -> list[M | Unreadable]:
    """The rows of *rows*, an :class:`Unreadable` in place of each one that cannot be read.

    The rows are read as usual. Only when that fails are they read again:
    their keys (ASCII ids: always readable), then each row by key from
    *within* (the unsliced queryset *rows* came from, *rows* itself by
    default). So one bad row costs its own page one query per row, and every
    other page nothing.
    """
    try:
        return list(rows)
    except READ_ERRORS as exc:
        why_unreadable(exc, rows.db)
    within = rows if within is None else within
    found: list[M | Unreadable] = []
    for pk in rows.values_list("pk", flat=True):
        try:
            found.extend(within.filter(pk=pk))
        except READ_ERRORS as exc:
            found.append(Unreadable(pk, why_unreadable(exc, rows.db)))
    return found


def stranded(limit: int, using: str | None = None) -> list[tuple[str, str]]:
    """Rows no drive will ever finish as they stand, and why (SPEC §11).

    ``running`` with no ``next_attempt_at`` (never due), and rows holding a
    coalescing key while not live (a status outside the vocabulary), which
    every start() of that key joins. Each read is a range of an index whose
    size tracks live runs (the due index, the live-key index).
    """
    runs = Run.objects.using(using) if using else Run.objects.all()
    never = runs.never_due().values_list("pk", flat=True)[:limit]
    keyed = runs.keyed_not_live().values_list("pk", "status")[:limit]
    return [
        (run_id, "running with no next_attempt_at: never due; cancel it or release it by hand")
        for run_id in never
    ] + [
        (run_id, f"status {status!r} holds the live key: start() joins it; cancel it")
        for run_id, status in keyed
    ]
