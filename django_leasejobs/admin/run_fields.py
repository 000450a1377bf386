"""The run page's fields: a run's columns as an operator reads them (SPEC A1, A2, A6).

Each is an ``@admin.display`` of :class:`~.runs.RunAdmin`; every one is
read-only and HTML-escaped, and a value that does not decode shows its raw
text and why (A2). Times read as :mod:`django_leasejobs.times` writes them,
in one named zone, and what depends on "now" -- a lease, a duration so far,
"12 min ago" -- is judged on the database's clock, read once per page (A8).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext_lazy as _

from django_leasejobs.codec import Decoded
from django_leasejobs.models import Run
from django_leasejobs.passes import IDLE_PASSES_WARN, IDLE_WARNING
from django_leasejobs.states import FailureCode, RunStatus

from .display import (
    OTHER,
    RUN_COLOURS,
    UNREADABLE,
    elapsed,
    json_block,
    lease_text,
    pre,
    progress,
    status_badge,
)
from .limits import limit_text
from .reading import unreadable
from .tasks import (
    what,
)
from .times import db_now, moment_tag


def _time_field(name: str, description: Any) -> Callable[[object, Run], SafeString | str]:
    """The run page's display of the time column *name*: exact, zoned, and how long ago."""

    @admin.display(description=description, ordering=name)
    def shown(self: object, run: Run) -> SafeString | str:
        when: datetime | None = getattr(run, name)
        return moment_tag(when, db_now(run))

    return shown


def _json_field(
    decoded: Callable[[Run], Decoded], description: Any, empty: Any = None
) -> Callable[[object, Run], SafeString | str]:
    """One display for every JSON column, so each reads alike: pretty-printed, folded when long,
    and shown as stored, with why, when it does not decode (A2)."""

    @admin.display(description=description)
    def shown(self: object, run: Run) -> SafeString | str:
        return json_block(decoded(run), empty=empty)

    return shown


class RunFields:
    """The run page's (and list's) derived fields, mixed into ``RunAdmin``."""

    @admin.display(description=_("job"), ordering="job")
    def what_display(self, run: Run) -> SafeString:
        """The job (or task path), with a line break allowed after each dot: on a phone the
        column wraps ``imports.<wbr>contacts`` instead of pushing the status off (A8)."""
        parts = re.split(r"(?<=[.:/_])(?=.)", what(run))
        return format_html_join(mark_safe("<wbr>"), "{}", ((part,) for part in parts))

    @admin.display(description=_("status"), ordering="status")
    def status_display(self, run: Run) -> str:
        reason = unreadable(run)
        if reason is not None:
            return format_html(
                '<span class="leasejobs-unreadable">{} {}</span>',
                status_badge(UNREADABLE, str(_("cannot be read"))),
                reason,
            )
        badge = status_badge(RUN_COLOURS.get(run.status, OTHER), run.get_status_display())
        if run.status == RunStatus.RUNNING and run.idle_passes >= IDLE_PASSES_WARN:
            # R3 keeps the run going: say why it may never end (issue 18).
            idle = IDLE_WARNING.format(passes=run.idle_passes)
            return format_html(
                '{} <span class="leasejobs-idle" style="color:#92400e">{}</span>', badge, idle
            )
        return badge

    @admin.display(description=_("limit"))
    def limit_display(self, run: Run) -> str:
        return limit_text(run)

    @admin.display(description=_("progress"))
    def progress_display(self, run: Run) -> str:
        return progress(run)

    @admin.display(description=_("failure"), ordering="failure_code")
    def failure_display(self, run: Run) -> str:
        return run.failure_code or "—"

    @admin.display(description=_("what it means"))
    def failure_meaning(self, run: Run) -> str:
        return FailureCode(run.failure_code).meaning if run.failure_code else "—"

    @admin.display(description=_("last error"))
    def last_error_display(self, run: Run) -> str:
        return pre(run.last_error) if run.last_error else "—"

    @admin.display(description=_("duration"))
    def duration_display(self, run: Run) -> str:
        return elapsed(run.started_at, run.ended_at, db_now(run))

    @admin.display(description=_("lease"))
    def lease_display(self, run: Run) -> str:
        return lease_text(run, db_now(run))

    @admin.display(description=_("rerun requested"))
    def rerun_display(self, run: Run) -> str:
        """A kick waiting (R1): said in words. No kick is no fault: a dash, never a red cross."""
        if not run.rerun_requested:
            return "—"
        return str(_("yes: one more run starts with the latest payload when this one completes"))

    payload_display = _json_field(Run.decoded_payload, _("payload"))
    cursor_display = _json_field(
        Run.decoded_cursor, _("cursor"), empty=_("no pass has committed yet")
    )
    counters_display = _json_field(Run.decoded_counters, _("counters"))
    result_display = _json_field(Run.decoded_result, _("result"), empty=_("none"))

    started_display = _time_field("started_at", _("started at"))
    updated_display = _time_field("updated_at", _("updated at"))
    ended_display = _time_field("ended_at", _("ended at"))
    next_attempt_display = _time_field("next_attempt_at", _("next attempt at"))
    lease_began_display = _time_field("lease_began_at", _("lease began at"))
