"""The run pages (A1, A2, A4, A7, A9): the list, the detail with its step ledger and its
buttons, the filters operators use, and "Start a run" (:mod:`.start_run`).

The list fits a 1 400 px window (A7): the id is shown short (the whole id in
its ``title`` and its text), the times are one column of relative times,
the lease is part of "next due" while there is one, and ``leasejobs/runs.css``
keeps the id and job columns in view when the table must still scroll.
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from django_leasejobs import store
from django_leasejobs.errors import READ_ERRORS, unreadable_reason
from django_leasejobs.models import Run, Step

from .common import (
    GuardedActionsMixin,
    ReadOnlyMixin,
    SafeChangeList,
    page_context,
)
from .display import (
    CappedCountPaginator,
)
from .filters import (
    RUN_ID,
    HeldFilter,
    JobFilter,
    QueueFilter,
    TaskFilter,
    ThrottledFilter,
    held_count,
)
from .held import mark_in_flight
from .next_due import mark_paused
from .reading import placeholder, read_columns, read_robustly, unreadable
from .run_columns import RunColumns
from .run_deletes import RunDeletes
from .run_fields import RunFields
from .run_page import RunPage
from .start_run import RunStarts
from .steps import StepInline
from .summary import summary
from .tasks import (
    TASK_FIELDS,
    TaskSection,
    is_task_run,
    task_fieldset,
    task_search,
)
from .times import mark_now

UNLISTED = ("payload", "cursor", "rerun_payload", "result", "last_error")
#: Where a run's page notes that its ledger holds no step.
NO_STEPS = "_leasejobs_no_steps"


class RunChangeList(SafeChangeList):
    """The run list: without the bulky columns, and around rows that cannot be read back."""

    def get_queryset(
        self, request: HttpRequest, exclude_parameters: list[str | None] | None = None
    ) -> QuerySet[Any]:
        return super().get_queryset(request, exclude_parameters).defer(*UNLISTED)

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        self.result_list = read_robustly(self.result_list, self.queryset)
        mark_paused(self.result_list)  # for "next due": one read for the page, not one a row
        mark_now(self.result_list)  # the database's "now" (L1), once for the page
        mark_in_flight(self.result_list)  # held runs' steps in flight (A8), one read


@admin.register(Run)
class RunAdmin(
    GuardedActionsMixin,
    RunStarts,  # its add view starts a run (A9); before ReadOnlyMixin, which refuses adding
    ReadOnlyMixin,
    TaskSection,
    RunColumns,
    RunFields,
    RunDeletes,
    RunPage,
):
    # Nine columns that fit 1 400 px (A7): attempts and the lease are said by "next due"
    # while they matter, the four times are one column. The status comes right after the
    # job, so that a phone's 390 px still show it beside the id and job (A8).
    list_display = (
        "short_id",
        "what_display",
        "status_display",
        "instance",
        "queue_display",
        "next_due_display",
        "progress_display",
        "failure_display",
        "times_display",
    )
    list_filter = (
        HeldFilter,
        ThrottledFilter,
        "status",
        JobFilter,
        TaskFilter,
        QueueFilter,
        "failure_code",
        "started_at",
    )
    search_fields = ("id", "job", "instance")  # see get_search_results
    ordering = ("-id",)
    paginator = CappedCountPaginator
    show_full_result_count = False
    list_per_page = 50
    inlines = (StepInline,)
    # Django's "Delete selected" replaced by one that refuses live runs (A7), first as Django's.
    actions = ("delete_selected", "cancel_runs", "retry_runs", "release_resume", "release_fail")
    guarded_actions = actions
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "id",
                    "job",
                    "instance",
                    "origin",
                    "queue",
                    "priority",
                    "status_display",
                    "next_due_display",
                    "limit_display",
                    "progress_display",
                )
            },
        ),
        (
            _("Failure"),
            {"fields": ("failure_display", "failure_meaning", "attempts", "last_error_display")},
        ),
        (
            _("Data"),
            {"fields": ("payload_display", "cursor_display", "counters_display", "result_display")},
        ),
        (
            _("Timing and lease"),
            {
                "fields": (
                    "started_display",
                    "updated_display",
                    "ended_display",
                    "duration_display",
                    "next_attempt_display",
                    "lease_display",
                    "lease_began_display",
                    "admission_misses",
                    "rerun_display",
                )
            },
        ),
    )
    # Everything shown is read-only (A6): the protocol owns these columns.
    readonly_fields = (
        *(cast(str, field) for _title, group in fieldsets for field in group["fields"]),
        *TASK_FIELDS,
    )

    change_form_template = "admin/leasejobs/run/change_form.html"

    class Media:
        css = {"all": ("leasejobs/runs.css",)}

    def get_fieldsets(self, request: HttpRequest, obj: Run | None = None) -> Any:
        """The run's fieldsets; for a Django task's run, its "Task" section second."""
        fieldsets: list[Any] = list(super().get_fieldsets(request, obj))
        if is_task_run(obj):
            fieldsets.insert(1, task_fieldset())
        return fieldsets

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Run], search_term: str
    ) -> tuple[QuerySet[Run], bool]:
        """Search by exact run id, job or instance (a task's path): each an index lookup.

        Django's default search is case-insensitive (``UPPER(...)`` or
        ``LIKE``), which no index serves: over a million runs it read the
        whole table, 0.6-0.9 s a page. ``task: PATH``, as the list names a
        task run, finds that task's runs.
        """
        term = search_term.strip()
        if not term:
            return queryset, False
        if RUN_ID.match(term):
            return queryset.filter(pk=term.upper()), False
        lookup = Q(job=term) | Q(instance=term)
        if (task := task_search(term)) is not None:
            lookup |= task
        return queryset.filter(lookup), False

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return RunChangeList

    def get_inline_instances(self, request: HttpRequest, obj: Run | None = None) -> list[Any]:
        """The step ledger, unless its rows cannot be read back: then say why (SPEC §12)."""
        if obj is not None and unreadable(obj) is None:
            try:
                steps = list(Step.objects.using(store.alias()).filter(run_id=obj.pk))
            except READ_ERRORS as exc:
                self.message_user(
                    request,
                    _("The step ledger cannot be read: %(reason)s")
                    % {"reason": unreadable_reason(exc)},
                    messages.WARNING,
                )
                return []
            if not steps:  # said in a line, not as an empty table (A8)
                vars(obj)[NO_STEPS] = True
                return []
        return super().get_inline_instances(request, obj)

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Run | None:
        """The run, or a placeholder saying why it cannot be read back (SPEC §12).

        Django's own ``get_object`` reads a ``ValueError`` (SQLite's impossible
        date) as "no such run", and lets a ``DatabaseError`` through as a 500.
        Read where runs are written, whatever the router does with reads: the
        page judges the lease and offers the actions valid for the run (§12).
        """
        if "\x00" in object_id:
            return None  # PostgreSQL refuses NUL in text: no run has such an id
        queryset = self.get_queryset(request).using(store.alias())
        lookup = {from_field or "pk": object_id}
        try:
            return queryset.get(**lookup)
        except Run.DoesNotExist:
            return None
        except READ_ERRORS as exc:
            if not queryset.filter(**lookup).exists():
                return None
            return placeholder(object_id, unreadable_reason(exc))

    def render_change_form(  # noqa: PLR0917 - Django's signature
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Run | None = None,
    ) -> HttpResponse:
        reason = None if obj is None else unreadable(obj)
        buttons = [] if obj is None else self.page_buttons(request, obj)
        if obj is None or reason is None:
            if obj is not None:
                context["leasejobs_summary"] = summary(obj, self.status_display(obj), buttons)
                context["leasejobs_no_steps"] = vars(obj).get(NO_STEPS, False)
            return super().render_change_form(request, context, add, change, form_url, obj)
        # The usual form would show a placeholder's blanks as values: show each column instead.
        return TemplateResponse(
            request,
            "admin/leasejobs/run/unreadable_page.html",
            page_context(
                self,
                request,
                title=_("View %s") % self.opts.verbose_name,
                subtitle=obj.pk,
                object_id=obj.pk,
                reason=reason,
                columns=read_columns(obj.pk),
                leasejobs_actions=buttons,
            ),
        )

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        held = held_count(request)
        if held and request.method == "GET":
            self.message_user(
                request,
                ngettext(
                    "%(count)d run is held and waits for a decision (filter: needs a decision).",
                    "%(count)d runs are held and wait for a decision (filter: needs a decision).",
                    held,
                )
                % {"count": held},
                messages.WARNING,
            )
        return super().changelist_view(request, extra_context)
