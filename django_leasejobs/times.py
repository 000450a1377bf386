"""Times and durations as text: the one place that decides how they read (SPEC A8).

Two kinds of text, each written one way:

* for programs -- payloads, ``--json`` output -- :func:`iso`: ISO 8601 in
  UTC (``2026-03-01T13:00:00+00:00``);
* for people -- the admin, ``leasejobs_status``'s tables, the worker's log
  lines -- :func:`moment`: ``2026-12-03 17:53:12 Europe/Paris``, the date,
  the 24-hour time to the second and the zone's name, always in the site's
  current time zone (``TIME_ZONE``, or the one a middleware activated for
  the request). A time on the same day as the page's *now* may leave its
  date out (``17:53:12 Europe/Paris``); chart axes label whole minutes
  (:func:`axis_stamp`) and name the zone once, beside the chart. Durations
  are :func:`duration`: ``850 ms``, ``1.5 s``, ``30 s``, ``2 min``,
  ``3 min 20 s``, ``1 h 5 min``, ``2 d 4 h``.

Django's ``DATETIME_FORMAT`` is not used: its default ("Dec. 3, 2026,
5:53 p.m.") has no seconds and no zone, and a locale's format replaces it, so
the admin and a terminal would read differently.

No ORM: every module may import it. The zone is Django's current time zone,
read at each call.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import overload
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.utils import timezone
from django.utils.translation import gettext as _

__all__ = [
    "NOW_WITHIN",
    "LogFormatter",
    "axis_stamp",
    "duration",
    "iso",
    "local",
    "moment",
    "relative",
    "zone_name",
    "zone_of",
    "zoned",
]

#: Closer to now than this reads as "now": the page's clock and the data's differ a little.
NOW_WITHIN = timedelta(seconds=2)


@overload
def iso(moment: datetime, *, zulu: bool = False) -> str: ...


@overload
def iso(moment: datetime | None, *, zulu: bool = False) -> str | None: ...


def iso(moment: datetime | None, *, zulu: bool = False) -> str | None:
    """Return *moment* in UTC as ISO 8601 text, or ``None`` for ``None``.

    A naive *moment* is taken as UTC: with ``USE_TZ = False`` Django stores
    UTC wall times (a system check warns). With *zulu*, UTC is written ``Z``
    (``2026-03-01T13:00:00Z``), as a schedule's payload carries its due
    times (S2, S5); otherwise ``+00:00``, as ``leasejobs_status --json``
    prints them.
    """
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    text = moment.astimezone(UTC).isoformat()
    return text.removesuffix("+00:00") + "Z" if zulu else text


def zone_name() -> str:
    """The name of the zone every time is shown in: Django's current time zone."""
    return timezone.get_current_timezone_name()


def local(when: datetime) -> datetime:
    """*when* in the current time zone; a naive *when* is UTC, as :func:`iso` takes it."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(timezone.get_current_timezone())


def moment(when: datetime, *, near: datetime | None = None) -> str:
    """*when* for a person: ``2026-12-03 17:53:12 UTC``, in the current zone, named.

    With *near* (the page's now), a time on the same day leaves its date out:
    ``17:53:12 UTC``.
    """
    shown = local(when)
    same_day = near is not None and local(near).date() == shown.date()
    text = f"{shown:%H:%M:%S}" if same_day else f"{shown:%Y-%m-%d %H:%M:%S}"
    return f"{text} {zone_name()}"


def axis_stamp(when: datetime, *, weekday: bool = False) -> str:
    """An interval's start on a chart's axis, to the minute: ``16:57``, ``Thu 16:00``.

    In the current zone, which the chart names once beside it.
    """
    shown = local(when)
    return f"{shown:%a %H:%M}" if weekday else f"{shown:%H:%M}"


def zoned(when: datetime, zone: str) -> str:
    """A schedule's due time: the site's :func:`moment`, its own zone's clock time beside.

    ``2026-12-02 02:00:00 UTC (03:00 Europe/Paris)``: one zone for every time
    on the page, and the wall time the cron expression speaks of. The
    schedule's date is given too when it is another day; a zone this process
    does not know, or the site's own, adds nothing.
    """
    shown = moment(when)
    own = zone_of(zone)
    if own is None or zone == zone_name():
        return shown
    there, here = when.astimezone(own), local(when)
    beside = f"{there:%H:%M}" if there.date() == here.date() else f"{there:%Y-%m-%d %H:%M}"
    return f"{shown} ({beside} {zone})"


def zone_of(name: str) -> ZoneInfo | None:
    """The time zone *name*, or ``None`` when this process does not know it."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):  # a row naming a zone this host lacks (A5)
        return None


def _seconds(value: timedelta | float) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


#: The units of a duration of a minute or more, each with the next smaller one.
_UNITS = (("d", 86_400, "h", 3600), ("h", 3600, "min", 60), ("min", 60, "s", 1))


def duration(value: timedelta | float) -> str:
    """*value* (a timedelta, or seconds) as briefly as is still exact enough to act on.

    ``850 ms`` and ``1.5 s`` (three significant digits) below ten seconds, whole seconds to a minute
    (``45 s``), then two units below ten of the larger (``3 min 20 s``,
    ``1 h 5 min``, ``2 d 4 h``) and one from there (``40 min``, ``12 h``):
    a retry "in 3 min 20 s" is worth its seconds, a run started "12 h" ago
    is not. A negative *value* reads as its size.
    """
    seconds = abs(_seconds(value))
    if seconds == 0:
        return "0 s"
    if seconds < 1:
        return f"{seconds * 1000:.3g} ms"
    if seconds < 10:
        return f"{seconds:.3g} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    for unit, size, smaller, smaller_size in _UNITS:
        count, rest = divmod(whole, size)
        if count >= 10:
            return f"{count} {unit}"
        if count:
            part = rest // smaller_size
            return f"{count} {unit} {part} {smaller}" if part else f"{count} {unit}"
    raise AssertionError("unreachable: a minute or more has a unit")  # pragma: no cover


def relative(when: datetime, now: datetime) -> str:
    """``in 1 min 20 s``, ``12 min ago`` or ``now``: *when* seen from *now*, to the second."""
    delta = when - now
    if abs(delta) < NOW_WITHIN:
        return _("now")
    span = duration(timedelta(seconds=round(abs(delta).total_seconds())))
    if delta > timedelta(0):
        return _("in %(span)s") % {"span": span}
    return _("%(span)s ago") % {"span": span}


class LogFormatter(logging.Formatter):
    """``%(asctime)s`` as :func:`moment` writes it: the worker's log lines name their zone.

    ``rundueJobs`` and ``leasejobs_status`` log with it when the site set up no
    logging of its own; a site's ``LOGGING`` may name it too
    (``"()": "django_leasejobs.times.LogFormatter"``).
    """

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return moment(datetime.fromtimestamp(record.created, UTC))
