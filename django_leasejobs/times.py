"""Times as text: the one ISO 8601 formatter (payloads, reports, JSON output).

Pure: no ORM, no settings, so every module may import it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import overload

__all__ = ["iso"]


@overload
def iso(moment: datetime, *, zulu: bool = False) -> str: ...


@overload
def iso(moment: datetime | None, *, zulu: bool = False) -> str | None: ...


def iso(moment: datetime | None, *, zulu: bool = False) -> str | None:
    """Return *moment* in UTC as ISO 8601 text, or ``None`` for ``None``.

    A naive *moment* is taken as UTC: with ``USE_TZ = False`` Django stores
    UTC wall times (a system check warns). With *zulu*, UTC is written ``Z``
    (``2026-03-01T13:00:00Z``), as a schedule's payload carries its due
    times (S2, S5); otherwise ``+00:00``, as ``leasejobs_status`` prints them.
    """
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    text = moment.astimezone(UTC).isoformat()
    return text.removesuffix("+00:00") + "Z" if zulu else text
