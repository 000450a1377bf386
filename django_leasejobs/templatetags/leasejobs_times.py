"""Template filters for the admin's own templates: times and durations as
:mod:`django_leasejobs.times` writes them (A8), never Django's ``DATETIME_FORMAT``.

``{% load leasejobs_times %}``, then ``{{ row.paused_at|moment }}`` and
``{{ seconds|duration }}``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django import template

from django_leasejobs import times

register = template.Library()  # filled as this module is imported; read-only after


@register.filter
def moment(when: datetime | None) -> str:
    """``2026-12-03 17:53:12 UTC``, or a dash for nothing."""
    return "—" if when is None else times.moment(when)


@register.filter
def duration(value: timedelta | float | None) -> str:
    """``30 s``, ``2 min``, ``1 h 5 min``, or a dash for nothing."""
    return "—" if value is None else times.duration(value)
