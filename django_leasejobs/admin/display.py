"""How the admin shows runs and schedules: escaped, decoded, and cheap to count.

Everything user-supplied (payloads, cursors, errors, notes) goes through
``format_html`` / ``escape``: a payload holding ``<script>`` is shown as text.

Nothing a row holds may turn a page into a 500 (A2, SPEC §11-12): a value too
deep to pretty-print is shown as stored, and a counter too large for a float
clamps the bar. Rows the backend cannot read back: :mod:`.reading`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

from django.core.paginator import Paginator
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

from django_leasejobs.codec import MAX_DEPTH, Decoded
from django_leasejobs.models import Run
from django_leasejobs.states import LeaseState, RunStatus, ScheduleState, Throttle
from django_leasejobs.times import duration, moment, relative

from .folds import described, fold

__all__ = [
    "CappedCountPaginator",
    "cron_in_words",
    "elapsed",
    "holder_text",
    "json_block",
    "lease_text",
    "pre",
    "progress",
    "status_badge",
    "table",
    "unreadable",
]


#: Colours of run statuses, for the eye, not for meaning.
RUN_COLOURS: dict[str, str] = {
    RunStatus.RUNNING: "#2563eb",
    RunStatus.DONE: "#15803d",
    RunStatus.FAILED: "#b91c1c",
    RunStatus.CANCELLED: "#6b7280",
    RunStatus.HELD: "#c2410c",
}
#: Colours of schedule states (S6): keyed apart, since both have "running" and "failed".
STATE_COLOURS: dict[str, str] = {
    ScheduleState.OK: "#15803d",
    ScheduleState.RUNNING: "#2563eb",
    ScheduleState.RETRYING: "#a16207",
    ScheduleState.PAUSED: "#6b7280",
    ScheduleState.STALLED: "#c2410c",
    ScheduleState.MISSED: "#b91c1c",
    ScheduleState.NEVER_RUN: "#6b7280",
    ScheduleState.ORPHANED: "#6b7280",
    ScheduleState.INVALID: "#b91c1c",
    ScheduleState.FAILED: "#b91c1c",
}
#: A row that cannot be read, and a value outside the vocabulary.
UNREADABLE, OTHER = "#b91c1c", "#374151"


class CappedCountPaginator(Paginator):  # type: ignore[type-arg]
    """Count at most ``CAP`` + 1 rows.

    The changelist counts its rows on every page load; over a million retained
    runs a full ``COUNT(*)`` is most of the page's cost. A count over a
    ``LIMIT``ed subquery costs at most ``CAP`` index entries, and the list
    simply says "10001" when there are more.
    """

    CAP = 10_000

    @cached_property
    def count(self) -> int:
        object_list: Any = self.object_list
        return int(object_list.values("pk")[: self.CAP + 1].count())


def status_badge(colour: str, label: str) -> SafeString:
    """A coloured badge: *colour* from :data:`RUN_COLOURS`, :data:`STATE_COLOURS` or the rest."""
    return format_html(
        '<span class="leasejobs-status" style="color:#fff;background:{};padding:1px 6px;'
        'border-radius:8px;white-space:nowrap">{}</span>',
        colour,
        label,
    )


def pre(text: str) -> SafeString:
    return format_html('<pre style="white-space:pre-wrap;margin:0">{}</pre>', text)


def _as_stored(title: str, reason: str, raw: str | None) -> SafeString:
    """The reason a value is not pretty-printed, always in view; the stored text, folded if long."""
    stored = pre(raw or "")
    return format_html(
        '<div class="leasejobs-decode-error"><strong style="color:#b91c1c">{}</strong> {}{}</div>',
        title,
        reason,
        fold(stored, raw or "", _("stored text")),
    )


def _nested_deeper(value: object, limit: int) -> bool:
    """Whether *value* nests lists and dicts more than *limit* levels, found without recursing."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth >= limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def json_block(decoded: Decoded, empty: Any = None) -> SafeString | str:
    """A decoded JSON column, pretty-printed; the raw text and the reason if it cannot be.

    Pretty-printing recurses once per level, so a value deeper than the codec
    ever writes (``MAX_DEPTH``, a restored or hand-edited row) is shown as
    stored rather than risk a ``RecursionError`` part-way through a page.
    A long value is folded (:func:`~.folds.fold`): a 100-item step result
    would otherwise make the run page many screens tall (A7).
    """
    if decoded.error:
        return _as_stored(_("Cannot be decoded:"), decoded.error, decoded.raw)
    if decoded.raw is None and empty is not None:
        return format_html("<em>{}</em>", empty)
    if isinstance(decoded.value, dict | list) and _nested_deeper(decoded.value, MAX_DEPTH):
        reason = _("nested more than %(levels)d levels deep, too deep to pretty-print.")
        return _as_stored(_("Shown as stored:"), reason % {"levels": MAX_DEPTH}, decoded.raw)
    text = json.dumps(decoded.value, indent=2, ensure_ascii=False, sort_keys=True)
    if not text.isascii() and not _utf8(text):
        # A lone surrogate (stored as a \u escape) cannot be sent as UTF-8.
        text = json.dumps(decoded.value, indent=2, ensure_ascii=True, sort_keys=True)
    return fold(pre(text), text, described(decoded.value))


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _number(value: int | float) -> str:
    """A counter as text, a huge int cut short: a 400-digit count would fill the list."""
    text = str(value)
    digits = text.lstrip("-")
    if isinstance(value, int) and len(digits) > 15:
        return f"{text[: len(text) - len(digits) + 8]}…({len(digits)} digits)"
    return text


#: What a counter that is not a number is shown as: its JSON kind, never its text.
_KINDS = {dict: "object", list: "array", str: "string", bool: "boolean"}


def _share(done: float, total: int) -> float:
    """How far *done* is towards *total*, in [0, 1], dividing only when it cannot overflow."""
    if done <= 0:
        return 0.0
    if done >= total:
        return 1.0
    return done / total  # done < total < 2**64: a float holds both


def unreadable(run: Run) -> str | None:
    """Why *run* stands in for a row that cannot be read back, or ``None`` for a real row."""
    reason: str | None = vars(run).get("_leasejobs_unreadable")
    return reason


def progress(run: Run) -> SafeString | str:
    """A bar when the run said its total (``p.total``), else its counters.

    The bar's numerator is the run's largest counter: for a walk that counts
    what it imported, that is how far it got.
    """
    if unreadable(run) is not None:
        return "—"
    counters = run.decoded_counters()
    values = counters.value if counters.ok and isinstance(counters.value, dict) else {}
    numbers = {name: v for name, v in values.items() if type(v) in (int, float)}
    if run.progress_total:
        done = max(numbers.values(), default=0)
        share = _share(done, run.progress_total)
        # Track and bar take their colours from runs.css: the admin's variables, dark mode too.
        return format_html(
            '<div class="leasejobs-progress" title="{} / {}"><div class="leasejobs-progress-done"'
            ' style="width:{}%"></div></div> {}%',
            _number(done),
            run.progress_total,
            f"{share * 100:.0f}",
            f"{share * 100:.0f}",
        )
    if not values:
        return "—"
    return ", ".join(
        f"{_printable(name)}="
        + (_number(numbers[name]) if name in numbers else _KINDS.get(type(value), "null"))
        for name, value in values.items()
    )


def _printable(text: str) -> str:
    """*text* as it can be sent as UTF-8: a lone surrogate becomes a ``\\u`` escape."""
    return text if _utf8(text) else text.encode("utf-8", "backslashreplace").decode("utf-8")


def elapsed(started: datetime | None, ended: datetime | None, now: datetime) -> str:
    """How long a run took, or has taken so far by *now* (the database's): ``1 h 5 min``."""
    if started is None:
        return "—"
    took = duration(max((ended or now) - started, timedelta(0)))
    return took if ended else _("%(took)s so far") % {"took": took}


def holder_text(run: Run) -> str:
    """Which process holds *run*, from its ``lease_holder`` (host:pid:start): ``w-2 pid 4182``."""
    host, _sep, rest = run.lease_holder.partition(":")
    pid = rest.split(":", 1)[0]
    return f"{host} pid {pid}" if host else "?"


def lease_text(run: Run, now: datetime) -> str:
    """Who holds the run and until when, judged at *now*, the database's time (L1, A8).

    A throttled run holds nothing: it waits for its limit (C5), whatever claim
    a drive has on it to ask that limit again.
    """
    if unreadable(run) is not None:
        return "—"
    state = run.lease_state(now)
    if state == LeaseState.THROTTLED:
        which = Throttle(run.throttled_by).label.lower() if run.throttled_by in Throttle else "?"
        return _("none: waiting for its %(which)s limit") % {"which": which}
    if state == LeaseState.FREE or run.next_attempt_at is None:
        return "—"
    holder, until = holder_text(run), moment(run.next_attempt_at, near=now)
    if state == LeaseState.EXPIRED:
        return _("%(holder)s, expired at %(until)s (%(ago)s)") % {
            "holder": holder,
            "until": until,
            "ago": relative(run.next_attempt_at, now),
        }
    if state == LeaseState.CLAIMED:
        return _("claimed by %(holder)s, not begun, until %(until)s") % {
            "holder": holder,
            "until": until,
        }
    return _("%(holder)s, a pass in flight, until %(until)s") % {"holder": holder, "until": until}


def cron_in_words(expression: str) -> str:
    """``0 3 * * *`` -> "At 03:00 (0 3 * * *)"; the bare expression if cron-descriptor cannot say.

    Locale and clock are given explicitly: cron-descriptor otherwise guesses
    them from the process's locale (warning when there is none), so the same
    admin would read "03:00 AM" on one server and "03:00" on another.
    """
    from cron_descriptor import ExpressionDescriptor, Options

    options = Options(locale_code="en_US", use_24hour_time_format=True)
    try:
        words = ExpressionDescriptor(expression, options).get_description()
    except Exception:  # words are a nicety; the expression is the truth
        return expression
    return f"{words} ({expression})"


def table(headers: Sequence[Any], rows: Iterable[Sequence[Any]]) -> SafeString | str:
    rows = list(rows)
    if not rows:
        return "—"
    head = format_html_join("", "<th>{}</th>", ((header,) for header in headers))
    body = format_html_join(
        "",
        "<tr>{}</tr>",
        ((format_html_join("", "<td>{}</td>", ((cell,) for cell in row)),) for row in rows),
    )
    return format_html("<table><thead><tr>{}</tr></thead><tbody>{}</tbody></table>", head, body)
