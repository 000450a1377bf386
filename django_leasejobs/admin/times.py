"""Times on the admin's pages, as ``<time>`` elements (A1, A5, A7, A8).

The text is :mod:`django_leasejobs.times`' -- the one place that decides how
a time or a duration reads -- so the run pages, the schedule pages, the
overview and ``leasejobs_status`` agree. What this module adds is markup:
the run list says "12 min ago" with the exact time (and zone) in the
``title``; an "until" says its clock time, then how far off.

Every "now" here is the database's (:func:`db_now`, L1): a lease is held or
expired by the clock that decides it, never by the web server's.
"""

from __future__ import annotations

from datetime import datetime

from django.db import router
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_leasejobs.clock import get_clock
from django_leasejobs.models import Run
from django_leasejobs.times import moment, relative

__all__ = ["NOW", "db_now", "mark_now", "moment_tag", "time_tag", "until_tag"]

#: Where a run carries the database's time its page was read at: once per page.
NOW = "_leasejobs_now"


def db_now(run: Run | None = None) -> datetime:
    """The database's time (L1, the write alias: the clock the store decides by).

    Kept on *run* once read, so that a page's fields judge it by one "now";
    the run list sets it on its rows with one read for the page
    (:func:`mark_now`).
    """
    cache = {} if run is None else vars(run)
    if cache.get(NOW) is None:
        cache[NOW] = get_clock().now(router.db_for_write(Run))
    now: datetime = cache[NOW]
    return now


def mark_now(runs: list[Run]) -> None:
    """Give each of *runs* the database's time, read once for the page."""
    if runs:
        now = get_clock().now(router.db_for_write(Run))
        for run in runs:
            vars(run)[NOW] = now


def moment_tag(when: datetime | None, now: datetime | None = None) -> SafeString | str:
    """*when* as :func:`~django_leasejobs.times.moment` writes it, and how long ago seen from
    *now* (``2026-12-03 17:53:12 UTC (12 min ago)``), in a ``<time>``."""
    if when is None:
        return "—"
    if now is None:
        return format_html('<time datetime="{}">{}</time>', when.isoformat(), moment(when))
    return format_html(
        '<time datetime="{}">{}</time> ({})', when.isoformat(), moment(when), relative(when, now)
    )


def time_tag(when: datetime | None, now: datetime) -> SafeString | str:
    """*when* relative to *now*, its exact time (and zone) in the ``title``, as in the markup."""
    if when is None:
        return "—"
    return _titled(when, relative(when, now))


def until_tag(when: datetime | None, now: datetime) -> SafeString | str:
    """An "until" time: its clock time, then how far off (``02:14:05 UTC (in 4 min)``)."""
    if when is None:
        return "—"
    return format_html("{} ({})", _titled(when, moment(when, near=now)), relative(when, now))


def _titled(when: datetime, text: str) -> SafeString:
    """*when* shown as *text*: a short form keeps the exact time (and zone) in its ``title``."""
    return format_html(
        '<time datetime="{}" title="{}">{}</time>', when.isoformat(), moment(when), text
    )
