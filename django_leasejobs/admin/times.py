"""How the admin writes times (A1, A5, A7): relative in the run list, and always with a zone.

A time on these pages is read by someone deciding what to do at 3 a.m., so
none is left to guess: the run list says "12m ago" with the exact time in
the ``title``; every exact time names its zone. Recorded times (when a run
started, when a schedule last ran or was paused) are shown in the site's
current time zone (``TIME_ZONE``, or the one a middleware activated), as the
rest of the admin shows them; a schedule's due times in the schedule's own
zone first, the site's beside them.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

__all__ = [
    "recorded",
    "relative",
    "span",
    "stamp",
    "time_tag",
    "until_tag",
    "zone_of",
    "zoned",
]

#: Closer to now than this reads as "now": the page and the database clocks differ a little.
NOW_WITHIN = timedelta(seconds=2)


def span(delta: timedelta) -> str:
    """*delta* as briefly as is still exact enough to act on.

    Two units below ten of the larger (``45s``, ``3m 20s``, ``1h 05m``,
    ``2d 4h``), one from there (``40m``, ``9h``, ``12d``): a retry "in 3m
    20s" is worth its seconds, a run started "9h" ago is not.
    """
    seconds = int(abs(delta).total_seconds())
    for unit, size, smaller, smaller_size in (
        ("d", 86_400, "h", 3600),
        ("h", 3600, "m", 60),
        ("m", 60, "s", 1),
    ):
        whole, rest = divmod(seconds, size)
        if whole >= 10:
            return f"{whole}{unit}"
        if whole:
            part = rest // smaller_size
            return f"{whole}{unit} {part:02d}{smaller}" if part else f"{whole}{unit}"
    return f"{seconds}s"


def relative(when: datetime, now: datetime) -> str:
    """``in 1m 20s``, ``12m 03s ago`` or ``now``: *when* seen from *now*."""
    delta = when - now
    if abs(delta) < NOW_WITHIN:
        return _("now")
    if delta > timedelta(0):
        return _("in %(span)s") % {"span": span(delta)}
    return _("%(span)s ago") % {"span": span(delta)}


def _current_zone_name() -> str:
    return timezone.get_current_timezone_name()


def stamp(when: datetime, *, seconds: bool = True) -> str:
    """*when* in the site's current time zone, naming it: ``2026-12-02 02:00:05 UTC``."""
    shown = timezone.localtime(when)
    text = f"{shown:%Y-%m-%d %H:%M:%S}" if seconds else f"{shown:%Y-%m-%d %H:%M}"
    return f"{text} {_current_zone_name()}"


def recorded(when: datetime | None) -> str:
    """A recorded time (a run began, a schedule was paused), to the minute, with its zone."""
    return "—" if when is None else stamp(when, seconds=False)


def time_tag(when: datetime | None, now: datetime) -> SafeString | str:
    """*when* relative to *now*, its exact time (and zone) in the ``title`` as in the markup."""
    if when is None:
        return "—"
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        when.isoformat(),
        stamp(when),
        relative(when, now),
    )


def until_tag(when: datetime | None, now: datetime) -> SafeString | str:
    """An "until" time: clock time, then how far off (``02:14:05 (in 4m)``); exact in ``title``."""
    if when is None:
        return "—"
    return format_html(
        '<time datetime="{}" title="{}">{}</time> ({})',
        when.isoformat(),
        stamp(when),
        f"{timezone.localtime(when):%H:%M:%S}",
        relative(when, now),
    )


def zone_of(name: str) -> ZoneInfo | None:
    """The time zone *name*, or ``None`` when this process does not know it."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):  # a row naming a zone this host lacks (A5)
        return None


def zoned(when: datetime | None, zone_name: str) -> str:
    """A due time in its schedule's zone, and the site's beside it when that differs.

    ``2026-12-02 03:00 Europe/Paris (02:00 UTC)``; the site's date is given
    too when it is another day. A zone this process does not know (the
    schedule reads "invalid") leaves the site's time alone.
    """
    if when is None:
        return "—"
    site = timezone.localtime(when)
    zone = zone_of(zone_name)
    if zone is None or zone_name == _current_zone_name():
        return f"{site:%Y-%m-%d %H:%M} {_current_zone_name()}"
    local = when.astimezone(zone)
    beside = f"{site:%H:%M}" if site.date() == local.date() else f"{site:%Y-%m-%d %H:%M}"
    return f"{local:%Y-%m-%d %H:%M} {zone_name} ({beside} {_current_zone_name()})"
