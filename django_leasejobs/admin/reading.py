"""Rows the backend cannot read back, as the admin shows them (SPEC §12, A2).

Such a row is listed as a placeholder run that says why; its detail page
reads each column on its own, so every column that can be read is shown and
each one that cannot says why -- never quoting what it holds.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib.admin.utils import display_for_value
from django.db.models import QuerySet

from django_leasejobs import reading
from django_leasejobs.codec import decode
from django_leasejobs.errors import READ_ERRORS, unreadable_reason
from django_leasejobs.models import Run
from django_leasejobs.reading import Unreadable
from django_leasejobs.store import alias
from django_leasejobs.times import moment

from .display import json_block, pre, unreadable

__all__ = ["placeholder", "read_columns", "read_robustly", "unreadable"]

#: The run columns holding JSON text, shown decoded.
JSON_COLUMNS = frozenset({"payload", "cursor", "counters", "rerun_payload", "result"})


def placeholder(pk: str, reason: str) -> Run:
    """A run holding only its id, standing in for a row that cannot be read back.

    What the lists show of it reads as unknown ("?", "—"), never as a value
    (a default status or a zero count would be a lie about the row).
    """
    run = Run(pk=pk, job="?", instance="?", status="unreadable")
    run._state.adding = False  # it stands for a stored row (an inline would clear a new one's id)
    vars(run).update(
        dict.fromkeys(("attempts", "started_at", "updated_at", "next_attempt_at"), None),
        _leasejobs_unreadable=reason,
    )
    return run


def read_robustly(rows: QuerySet[Run], within: QuerySet[Run] | None = None) -> list[Run]:
    """The runs of *rows*, a :func:`placeholder` for each one the backend cannot read back."""
    return [
        placeholder(*run) if isinstance(run, Unreadable) else run
        for run in reading.read_robustly(rows, within)
    ]


def read_columns(pk: str) -> list[tuple[str, str, Any, str | None]]:
    """Each column of run *pk* read on its own: (label, name, shown value, why it cannot be read).

    For the detail page of a row that cannot be read whole: every column
    that can be read is shown as such, and each one that cannot says why,
    without quoting what it holds (an error message may quote a payload).
    """
    one = Run.objects.using(alias()).filter(pk=pk)  # a run page: where runs are written (§12)
    columns: list[tuple[str, str, Any, str | None]] = []
    for field in Run._meta.concrete_fields:
        label, name = str(field.verbose_name), field.attname
        try:
            values = list(one.values_list(name, flat=True))
        except READ_ERRORS as exc:
            columns.append((label, name, None, unreadable_reason(exc)))
            continue
        value = values[0] if values else None
        if name in JSON_COLUMNS:
            shown: Any = json_block(decode(value), empty="—")
        elif name == "last_error" and value:
            shown = pre(value)
        elif isinstance(value, datetime):
            shown = moment(value)  # as every time the admin shows (A8)
        else:
            shown = display_for_value(value if value != "" else None, "—")
        columns.append((label, name, shown, None))
    return columns
