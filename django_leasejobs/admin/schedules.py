"""The schedule pages (A5) and the missed ledger.

Every time on them reads as :mod:`django_leasejobs.times` writes it, in the
site's current time zone, named (A8): a due time with the schedule's own
zone's clock time beside it ("2026-12-02 02:00:00 UTC (03:00 Europe/Paris)"),
a recorded time -- a last run, a pause, a success -- alone.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.contrib.admin.views.main import ChangeList
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from django_leasejobs import schedules
from django_leasejobs.clock import get_clock, plus
from django_leasejobs.errors import READ_ERRORS, unreadable_reason
from django_leasejobs.models import Missed, Run, Schedule
from django_leasejobs.schedules.base import schedule_db
from django_leasejobs.states import ScheduleState
from django_leasejobs.times import moment, zoned

from .common import (
    GuardedActionsMixin,
    MissedModelAdmin,
    ReadOnlyMixin,
    SafeChangeList,
    cannot_be_read,
)
from .display import (
    OTHER,
    STATE_COLOURS,
    UNREADABLE,
    CappedCountPaginator,
    cron_in_words,
    status_badge,
    table,
)
from .reading import placeholder, read_robustly, unreadable
from .schedule_actions import ScheduleActions
from .times import moment_tag


def recorded(when: datetime | None) -> str:
    """A recorded time (a run began, a schedule was paused), or a dash."""
    return "—" if when is None else moment(when)


def due(when: datetime | None, zone: str) -> str:
    """A due time in the site's zone, the schedule's own *zone* beside it, or a dash."""
    return "—" if when is None else zoned(when, zone)


LIVE = "_leasejobs_live"
#: The database's time the page reads its schedules' states at (S6, L1): once per page.
NOW = "_leasejobs_now"


def read_live_runs(jobs: list[str]) -> dict[str, Run]:
    """Each job's live run, a placeholder for one the backend cannot read back (SPEC §12).

    Read for all the jobs at once; only if that fails, job by job.
    """
    try:
        return schedules.live_runs(jobs)
    except READ_ERRORS:
        pass
    live: dict[str, Run] = {}
    for job in jobs:
        try:
            live.update(schedules.live_runs([job]))
        except READ_ERRORS as exc:
            live[job] = placeholder("?", unreadable_reason(exc))
    return live


class ScheduleChangeList(SafeChangeList):
    """The schedule list, each row carrying its live run: read with the page, for its request."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        rows: list[Schedule] = list(self.result_list)
        live = read_live_runs([row.job for row in rows])
        now = get_clock().now(schedule_db()) if rows else None
        for row in rows:
            vars(row)[LIVE] = live.get(row.job)
            vars(row)[NOW] = now
        self.result_list = rows


@admin.register(Schedule)
class ScheduleAdmin(GuardedActionsMixin, ReadOnlyMixin, ScheduleActions):
    list_display = (
        "job",
        "cron_display",
        "timezone",
        "state_display",
        "next_due_display",
        "last_run_display",
        "missed_24h",
        "paused_display",
    )
    list_filter = ("enabled", "rule")
    search_fields = ("=job",)
    ordering = ("job",)
    actions = ("pause_schedules", "resume_schedules", "run_now")
    guarded_actions = actions
    fields = (
        "job",
        "cron_display",
        "expression",
        "timezone",
        "rule",
        "state_display",
        "enabled",
        "next_due_display",
        "paused_display",
        "last_run_display",
        "last_success_display",
        "recent_runs",
        "missed_ledger",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Schedule]:
        # The last 24 hours by the database's clock, in the statement itself (L1).
        since = plus(get_clock().now_expr(), -timedelta(hours=24))
        missed = (
            Missed.objects.filter(job=OuterRef("job"), recorded_at__gte=since)
            .values("job")
            .annotate(n=Count("pk"))
            .values("n")
        )
        return (
            super()
            .get_queryset(request)
            .annotate(missed_24h=Coalesce(Subquery(missed, output_field=IntegerField()), 0))
        )

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return ScheduleChangeList

    @staticmethod
    def live_run(row: Schedule) -> Run | None:
        """*row*'s live run, kept on the row: one admin serves concurrent requests.

        The list reads its page's live runs at once (``ScheduleChangeList``);
        the detail page reads its row's here.
        """
        cache = vars(row)
        if LIVE not in cache:
            cache[LIVE] = read_live_runs([row.job]).get(row.job)
        live: Run | None = cache[LIVE]
        return live

    @staticmethod
    def read_now(row: Schedule) -> datetime:
        """The database's time for *row*'s state (S6): the list's, or read for the detail page."""
        cache = vars(row)
        if cache.get(NOW) is None:
            cache[NOW] = get_clock().now(schedule_db())
        now: datetime = cache[NOW]
        return now

    @admin.display(description=_("cron"))
    def cron_display(self, row: Schedule) -> str:
        return cron_in_words(row.expression)

    @admin.display(description=_("state"))
    def state_display(self, row: Schedule) -> str:
        live = self.live_run(row)
        reason = None if live is None else unreadable(live)
        if reason is not None:  # its state turns on when the run began, which cannot be read
            badge = status_badge(UNREADABLE, str(_("live run cannot be read")))
            return format_html("{} {}", badge, reason)
        current = schedules.state(row, live, self.read_now(row))
        badge = status_badge(STATE_COLOURS.get(current, OTHER), current.replace("_", " "))
        why = schedules.problem(row) if current == ScheduleState.INVALID else None
        return format_html("{} {}", badge, why) if why else badge

    @admin.display(description=_("next due"), ordering="next_due_at")
    def next_due_display(self, row: Schedule) -> str:
        """The next due time in the schedule's own zone, and the site's (A5)."""
        return due(row.next_due_at, row.timezone)

    @admin.display(description=_("last run"))
    def last_run_display(self, row: Schedule) -> str:
        if row.last_run_id is None:
            return "—"
        return f"{recorded(row.last_run_at)} · {row.last_outcome or 'running'}"

    @admin.display(description=_("last success"))
    def last_success_display(self, row: Schedule) -> str:
        return recorded(row.last_success_at)

    @admin.display(description=_("missed (24 h)"), ordering="missed_24h")
    def missed_24h(self, row: Schedule) -> int:
        return int(getattr(row, "missed_24h", 0))

    @admin.display(description=_("paused"))
    def paused_display(self, row: Schedule) -> str:
        if row.paused_at is None:
            return "—"
        note = f": {row.pause_note}" if row.pause_note else ""
        return f"{row.paused_by} at {recorded(row.paused_at)}{note}"

    @admin.display(description=_("recent runs"))
    def recent_runs(self, row: Schedule) -> str:
        shown = Run.objects.only("id", "status", "started_at", "ended_at", "failure_code")
        runs = read_robustly(shown.filter(job=row.job).order_by("-id")[:20], shown)
        return table(
            [_("run"), _("status"), _("started"), _("ended"), _("failure")],
            rows=[
                (
                    run.pk,
                    cannot_be_read(run) or run.status,
                    recorded(run.started_at),
                    recorded(run.ended_at),
                    run.failure_code or "—",
                )
                for run in runs
            ],
        )

    @admin.display(description=_("missed due times"))
    def missed_ledger(self, row: Schedule) -> str:
        ledger = Missed.objects.filter(job=row.job).order_by("-due_at")[:50]
        return table(
            [_("due at"), _("cause"), _("action"), _("run"), _("recorded")],
            rows=[
                (
                    due(m.due_at, row.timezone),
                    m.cause,
                    m.action,
                    m.run_id or "—",
                    recorded(m.recorded_at),
                )
                for m in ledger
            ],
        )


@admin.register(Missed)
class MissedAdmin(ReadOnlyMixin, MissedModelAdmin):
    list_display = ("job", "due_display", "cause", "action", "run_link", "recorded_display")
    list_filter = ("cause", "action")
    search_fields = ("=job",)
    ordering = ("-due_at",)
    paginator = CappedCountPaginator
    show_full_result_count = False
    fields = ("job", "due_display", "cause", "action", "run_link", "recorded_display")
    readonly_fields = fields

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return SafeChangeList

    @admin.display(description=_("due at"), ordering="due_at")
    def due_display(self, row: Missed) -> str:
        return moment_tag(row.due_at)

    @admin.display(description=_("recorded at"), ordering="recorded_at")
    def recorded_display(self, row: Missed) -> str:
        return moment_tag(row.recorded_at)

    @admin.display(description=_("run"), ordering="run_id")
    def run_link(self, row: Missed) -> str:
        """The run's id, from the row itself: joining would read every run's payload."""
        if row.run_id is None:
            return "—"
        url = reverse(f"{self.admin_site.name}:leasejobs_run_change", args=[quote(row.run_id)])
        return format_html('<a href="{}">{}</a>', url, row.run_id)
