"""The queue controls (SPEC W6, O5) and the overview's place in the admin (O4).

The paused queues' list is read-only: a row is added by pausing a queue and
removed by resuming it, each through :mod:`django_leasejobs.operators`
(compare-and-sets that notify the workers, W2), never by editing or
deleting a row here. Pausing and resuming are for users with
``leasejobs.change_run`` -- the permission that stands for "may change how
runs are driven", as ``view_run`` stands for reading them -- and each goes
through a confirmation page: a GET only asks, the POST (with its CSRF token)
acts. Each outcome is said, "already paused" and "not paused" too, and each
change is recorded in LogEntry: the row's ADDITION on a pause, its DELETION on
a resume. A queue name that is not one (§2: 1-100 characters, no NUL) is
refused with a message, never a 500.

The overview hangs off this admin's URLs (``get_urls``, as Django's docs add
a view to a ``ModelAdmin``): a reusable app cannot add URLs to the site's
``AdminSite`` without asking the site to use a subclass of it, and this is
the admin of the page's subject, the queues.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.translation import gettext_lazy as _

from django_leasejobs import operators
from django_leasejobs.models import PausedQueue
from django_leasejobs.routing import queue_problem

from .common import GuardedActionsMixin, ReadOnlyMixin, actor, page_context
from .overview import CHANGE, VIEW, overview_page
from .times import moment_tag

if TYPE_CHECKING:
    PausedQueueModelAdmin = admin.ModelAdmin[PausedQueue]
else:  # The admin classes are not subscriptable at runtime.
    PausedQueueModelAdmin = admin.ModelAdmin

__all__ = ["PausedQueueAdmin"]

CONFIRM = "admin/leasejobs/overview/confirm.html"


@admin.register(PausedQueue)
class PausedQueueAdmin(GuardedActionsMixin, ReadOnlyMixin, PausedQueueModelAdmin):
    list_display = ("queue", "paused_by", "paused_at_display", "note")
    search_fields = ("=queue",)
    ordering = ("queue",)
    fields = list_display
    readonly_fields = list_display

    @admin.display(description=_("paused at"), ordering="paused_at")
    def paused_at_display(self, row: PausedQueue) -> str:
        return moment_tag(row.paused_at)

    actions = ("resume_queues",)
    guarded_actions = actions
    change_list_template = "admin/leasejobs/overview/paused_queues.html"

    def get_urls(self) -> list[URLPattern]:
        def wrap(view: Any) -> Any:
            return self.admin_site.admin_view(view)

        return [
            path("overview/", wrap(self.overview_view), name="leasejobs_overview"),
            path("pause/", wrap(self.pause_view), name="leasejobs_pausedqueue_pause"),
            path("resume/", wrap(self.resume_view), name="leasejobs_pausedqueue_resume"),
            *super().get_urls(),
        ]

    # -- permissions: the run permissions, as the overview's ---------------------------------

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm(VIEW) or super().has_view_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a resume is operators.resume_queue, which also wakes the workers

    def has_resume_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(CHANGE)

    # -- the pages ---------------------------------------------------------------------------

    def overview_view(self, request: HttpRequest) -> HttpResponse:
        return overview_page(self, request)

    def _url(self, name: str) -> str:
        return reverse(f"{self.admin_site.name}:leasejobs_{name}")

    def _refused(self, request: HttpRequest, problem: str, back: str) -> HttpResponseRedirect:
        self.message_user(
            request, _("Nothing was changed: %(problem)s.") % {"problem": problem}, messages.ERROR
        )
        return HttpResponseRedirect(back)

    def _confirm(self, request: HttpRequest, **context: Any) -> TemplateResponse:
        request.current_app = self.admin_site.name
        return TemplateResponse(request, CONFIRM, page_context(self, request, **context))

    def pause_view(self, request: HttpRequest) -> HttpResponse:
        """Ask for a note (GET), then pause the queue (POST), W6."""
        if not request.user.has_perm(CHANGE):
            raise PermissionDenied
        data = request.POST if request.method == "POST" else request.GET
        queue, note = data.get("queue"), data.get("note", "")
        overview = self._url("overview")
        if problem := queue_problem("queue", queue):
            return self._refused(request, problem, overview)
        assert isinstance(queue, str)
        error = None
        if request.method == "POST":
            if len(note) <= operators.NOTE_MAX:
                self._pause(request, queue, note)
                return HttpResponseRedirect(overview)
            error = _("A note is at most %(n)d characters.") % {"n": operators.NOTE_MAX}
        return self._confirm(
            request,
            title=_("Pause queue %(queue)s") % {"queue": queue},
            verb="pause",
            queues=[(queue, PausedQueue.objects.filter(queue=queue).first())],
            action=self._url("pausedqueue_pause"),
            note=note,
            note_max=operators.NOTE_MAX,
            error=error,
            back=overview,
            back_label=_("Overview"),
        )

    def _pause(self, request: HttpRequest, queue: str, note: str) -> None:
        if operators.pause_queue(queue, actor(request), note):
            row = PausedQueue.objects.filter(queue=queue).first()
            if row is not None:  # None only if resumed again at once
                self.log_addition(request, row, f"Paused: {note}" if note else "Paused")
            self.message_user(
                request, _("Queue %(queue)s paused.") % {"queue": queue}, messages.SUCCESS
            )
            return
        row = PausedQueue.objects.filter(queue=queue).first()
        self.message_user(
            request,
            _("Queue %(queue)s is already paused (by %(by)s): nothing was changed.")
            % {"queue": queue, "by": (row.paused_by if row else "") or "—"},
            messages.INFO,
        )

    def resume_view(self, request: HttpRequest) -> HttpResponse:
        """Ask (GET), then resume each queue named (POST), W6."""
        if not request.user.has_perm(CHANGE):
            raise PermissionDenied
        data = request.POST if request.method == "POST" else request.GET
        names = data.getlist("queue")
        from_list = data.get("from") == "list"
        back = self._url("pausedqueue_changelist") if from_list else self._url("overview")
        if not names:
            return self._refused(request, str(_("no queue was named")), back)
        for name in names:
            if problem := queue_problem("queue", name):
                return self._refused(request, problem, back)
        if request.method == "POST":
            for name in names:
                self._resume(request, name)
            return HttpResponseRedirect(back)
        rows = {row.queue: row for row in PausedQueue.objects.filter(queue__in=names)}
        return self._confirm(
            request,
            title=_("Resume queues") if len(names) > 1 else _("Resume queue %s") % names[0],
            verb="resume",
            queues=[(name, rows.get(name)) for name in names],
            action=self._url("pausedqueue_resume"),
            from_list=from_list,
            back=back,
            back_label=_("Paused queues") if from_list else _("Overview"),
        )

    def _resume(self, request: HttpRequest, queue: str) -> None:
        rows = PausedQueue.objects.filter(queue=queue)
        found = list(rows)  # read before the resume deletes it: the queryset keeps it to log
        if operators.resume_queue(queue, actor(request)):
            if found:
                self.log_deletions(request, rows)
            self.message_user(
                request, _("Queue %(queue)s resumed.") % {"queue": queue}, messages.SUCCESS
            )
        else:
            self.message_user(
                request,
                _("Queue %(queue)s is not paused: nothing was changed.") % {"queue": queue},
                messages.INFO,
            )

    @admin.action(description=_("Resume selected queues…"), permissions=["resume"])
    def resume_queues(
        self, request: HttpRequest, queryset: QuerySet[PausedQueue]
    ) -> TemplateResponse:
        """The same confirmation as the overview's Resume, posting to the same view."""
        rows = list(queryset.order_by("queue"))
        return self._confirm(
            request,
            title=_("Resume queues"),
            verb="resume",
            queues=[(row.queue, row) for row in rows],
            action=self._url("pausedqueue_resume"),
            from_list=True,
            back=self._url("pausedqueue_changelist"),
            back_label=_("Paused queues"),
        )
