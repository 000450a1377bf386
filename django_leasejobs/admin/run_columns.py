"""The run list's compact columns (A1, A7): what lets the list fit a 1 400 px window.

The id shown short, the queue with its priority, "next due" (which also
says who holds a leased run, and how many passes in a row failed), and one
column of relative times where there were five. ``leasejobs/runs.css`` lays
them out and keeps the id and job columns in view.
"""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from django_leasejobs.models import Run
from django_leasejobs.times import duration

from .next_due import next_due_html
from .reading import unreadable
from .times import db_now, time_tag

__all__ = ["RunColumns"]


class RunColumns:
    """The run list's columns of its own making (the run page shows "next due" too)."""

    @admin.display(description=_("id"), ordering="id")
    def short_id(self, run: Run) -> SafeString:
        """The whole id, shown as its last characters (``runs.css``): a ULID's first ten
        are its time, the same for every run of the same minute or so."""
        return format_html('<span class="leasejobs-id" title="{}">{}</span>', run.pk, run.pk)

    @admin.display(description=_("next due"), ordering="next_attempt_at")
    def next_due_display(self, run: Run) -> SafeString | str:
        """When a live run is next due, and why (A7, C5): back-off, run_after, throttle, lease."""
        return next_due_html(run)

    @admin.display(description=_("queue"), ordering="queue")
    def queue_display(self, run: Run) -> str:
        """The queue, and the priority when it is not the default 0 (D7, W4)."""
        if unreadable(run) is not None:
            return "?"
        if not run.priority:
            return str(run.queue)
        return str(_("%(queue)s, priority %(priority)+d")) % {
            "queue": run.queue,
            "priority": run.priority,
        }

    @admin.display(description=_("times"), ordering="started_at")
    def times_display(self, run: Run) -> SafeString | str:
        """Started, updated and ended, relative to now (exact in each ``title``), and the
        duration: one column instead of five (A1, A7)."""
        if unreadable(run) is not None or run.started_at is None:
            return "—"
        now = db_now(run)
        lines = [(_("started"), time_tag(run.started_at, now))]
        if run.ended_at is None:  # a finished run was last updated as it ended
            lines.append((_("updated"), time_tag(run.updated_at, now)))
        else:
            lines.append((_("ended"), time_tag(run.ended_at, now)))
            took = format_html(
                '<span class="leasejobs-took">{}</span>', duration(run.ended_at - run.started_at)
            )
            lines.append((_("took"), took))
        return format_html(
            '<div class="leasejobs-times">{}</div>',
            format_html_join("", "<div>{} {}</div>", lines),
        )
