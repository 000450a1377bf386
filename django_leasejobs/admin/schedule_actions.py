"""The schedule list's actions: pause (with a note), resume, run now (SPEC A5, S4, S5).

Each calls the operators' functions -- compare-and-sets -- never a queryset's
``update()``, reports its outcome with ``message_user``, and records a
``LogEntry``; each needs its permission (``pause_schedule``,
``run_schedule_now``).
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.translation import gettext_lazy as _

from django_leasejobs import operators
from django_leasejobs.exceptions import JobNotRegistered, RunNowRefused
from django_leasejobs.models import Schedule
from django_leasejobs.registry import get_job

from .common import (
    ScheduleModelAdmin,
    actor,
    not_registered,
    page_context,
    report_outcome,
)

LIVE = "_leasejobs_live"
#: The database's time the page reads its schedules' states at (S6, L1): once per page.
NOW = "_leasejobs_now"


class ScheduleActions(ScheduleModelAdmin):
    """The actions of :class:`~.schedules.ScheduleAdmin`, mixed into it."""

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("leasejobs.pause_schedule")

    def has_run_now_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("leasejobs.run_schedule_now")

    @admin.action(description=_("Pause selected schedules…"), permissions=["pause"])
    def pause_schedules(
        self, request: HttpRequest, queryset: QuerySet[Schedule]
    ) -> HttpResponse | None:
        if "apply" not in request.POST:  # ask for the note first (S4)
            return TemplateResponse(
                request,
                "admin/leasejobs/schedule/pause.html",
                page_context(
                    self,
                    request,
                    schedules=queryset,
                    note_max=operators.NOTE_MAX,
                    title=_("Pause schedules"),
                ),
            )
        note = request.POST.get("note", "")[: operators.NOTE_MAX]
        done = asked = 0
        for row in queryset:
            try:
                # Refused as resume and run now are: this admin could not undo the pause.
                get_job(row.job)
            except JobNotRegistered:
                not_registered(self, request, row.job)
                continue
            asked += 1
            if operators.pause(row.job, actor(request), note).done:
                done += 1
                self.log_change(request, row, f"Paused: {note}" if note else "Paused")
        if asked:
            report_outcome(
                self, request, done=done, asked=asked, verb=_("paused"), why=_("already paused")
            )
        return None

    @admin.action(description=_("Resume selected schedules"), permissions=["pause"])
    def resume_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        done = asked = 0
        for row in queryset:
            try:
                result = operators.resume(row.job, actor(request))
            except JobNotRegistered:  # refused before anything was written
                not_registered(self, request, row.job)
                continue
            asked += 1
            if result.done:
                done += 1
                self.log_change(request, row, f"Resumed ({result.missed} missed due times)")
        if asked:
            report_outcome(
                self, request, done=done, asked=asked, verb=_("resumed"), why=_("not paused")
            )

    @admin.action(description=_("Run now"), permissions=["run_now"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        for row in queryset:
            try:
                result = operators.run_now(row.job, actor(request))
            except RunNowRefused as refused:
                self.message_user(request, f"{row.job}: {refused}", messages.WARNING)
                continue
            except JobNotRegistered:
                not_registered(self, request, row.job)
                continue
            self.log_change(request, row, f"Run now: run {result.run.pk}")
            self.message_user(request, f"{row.job}: started run {result.run.pk}", messages.SUCCESS)
