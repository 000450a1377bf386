"""The operators' admin (SPEC §8, A1-A6).

Operators read runs and schedules here and act on them through the store's
compare-and-set functions (cancel, retry, release, pause, resume, run now) --
never by editing a field: payload, cursor and lease are the protocol's (A6).
Every action says what happened, including "already finished", and is
recorded in the admin's LogEntry history.

No page answers a 500 for what a row holds or a request asks (A2, SPEC
§11-12): rows the backend cannot read back are listed and shown as
placeholders that say why, a parameter holding a NUL (which PostgreSQL
refuses in text) is an invalid lookup, and an action on a job this process
does not register is refused with a warning.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.utils import quote
from django.contrib.admin.views.main import ERROR_FLAG, ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import Count, IntegerField, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from . import schedules, store
from .admin_display import (
    READ_ERRORS,
    CappedCountPaginator,
    cron_in_words,
    duration,
    json_block,
    lease_text,
    placeholder,
    pre,
    progress,
    read_columns,
    read_robustly,
    status_badge,
    table,
    unreadable,
)
from .errors import unreadable_reason
from .exceptions import JobNotRegistered, RetryRefused
from .models import Missed, Run, Schedule, Step
from .registry import get_job
from .states import FailureCode, RunStatus

if TYPE_CHECKING:
    RunModelAdmin = admin.ModelAdmin[Run]
    ScheduleModelAdmin = admin.ModelAdmin[Schedule]
    MissedModelAdmin = admin.ModelAdmin[Missed]
    StepTabularInline = admin.TabularInline[Step, Run]
else:  # The admin classes are not subscriptable at runtime.
    RunModelAdmin = ScheduleModelAdmin = MissedModelAdmin = admin.ModelAdmin
    StepTabularInline = admin.TabularInline


class ReadOnlyMixin:
    """The protocol owns these rows: operators read them, actions change them (A6)."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def has_nul(params: QueryDict) -> bool:
    """Whether a parameter holds a NUL: PostgreSQL refuses it in text, so no lookup can use it."""
    return any("\x00" in key or any("\x00" in v for v in values) for key, values in params.lists())


def invalid_lookup(request: HttpRequest) -> HttpResponseRedirect:
    """Answer as Django's admin does for a lookup it cannot run: the list, flagged ``?e=1``."""
    return HttpResponseRedirect(f"{request.path}?{ERROR_FLAG}=1")


class SafeChangeList(ChangeList):
    """A change list for which a NUL in a parameter is an invalid lookup, not a 500."""

    def __init__(self, request: HttpRequest, *args: Any, **kwargs: Any) -> None:
        if has_nul(request.GET):
            raise IncorrectLookupParameters
        super().__init__(request, *args, **kwargs)


#: What the run list never shows: up to megabytes a row, read only by the detail page.
UNLISTED = ("payload", "cursor", "rerun_payload", "last_error")


class RunChangeList(SafeChangeList):
    """The run list: without the bulky columns, and around rows that cannot be read back."""

    def get_queryset(
        self, request: HttpRequest, exclude_parameters: list[str | None] | None = None
    ) -> QuerySet[Any]:
        return super().get_queryset(request, exclude_parameters).defer(*UNLISTED)

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        self.result_list = read_robustly(self.result_list, self.queryset)


#: Where a schedule row keeps its live run, once read (see ``ScheduleAdmin.live_run``).
LIVE = "_leasejobs_live"


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
        for row in rows:
            vars(row)[LIVE] = live.get(row.job)
        self.result_list = rows


class GuardedActionsMixin:
    """A POST naming an action the user may not use is a 403, not a silent no-op (A3)."""

    guarded_actions: tuple[str, ...] = ()

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if request.method == "POST" and has_nul(request.POST):
            return invalid_lookup(request)  # a selected id with a NUL cannot even be looked up
        action = request.POST.get("action") if request.method == "POST" else None
        allowed = cast("admin.ModelAdmin[Any]", self).get_actions(request)
        if action in self.guarded_actions and action not in allowed:
            raise PermissionDenied
        response: HttpResponse = super().changelist_view(request, extra_context)  # type: ignore[misc]
        return response


def report_outcome(
    model_admin: Any, request: HttpRequest, *, done: int, asked: int, verb: Any, why: Any
) -> None:
    """Say what an action did, and what it left as it was and why (A3)."""
    opts = model_admin.model._meta

    def things(n: int) -> Any:
        return opts.verbose_name if n == 1 else opts.verbose_name_plural

    model_admin.message_user(
        request,
        _("%(n)d %(things)s %(verb)s.") % {"n": done, "things": things(done), "verb": verb},
        messages.SUCCESS if done else messages.INFO,
    )
    if asked > done:
        left = asked - done
        model_admin.message_user(
            request,
            ngettext(
                "%(n)d %(things)s left as it was: %(why)s.",
                "%(n)d %(things)s left as they were: %(why)s.",
                left,
            )
            % {"n": left, "things": things(left), "why": why},
            messages.WARNING,
        )


def _actor(request: HttpRequest) -> str:
    return str(request.user.get_username())


def _cannot_be_read(run: Run) -> str | None:
    reason = unreadable(run)
    return None if reason is None else _("cannot be read: %(reason)s") % {"reason": reason}


def _not_registered(model_admin: Any, request: HttpRequest, job: str, run: str = "") -> None:
    """Refuse an action on a job this process does not register (D2): it would run nowhere."""
    message = _("%(job)s is not registered in this process: nothing was changed.") % {"job": job}
    model_admin.message_user(request, f"{run}: {message}" if run else message, messages.WARNING)


# -- runs ---------------------------------------------------------------------------------


class StepInline(ReadOnlyMixin, StepTabularInline):
    """The step ledger of the pass in flight, or of the last failed one (A2)."""

    model = Step
    extra = 0
    can_delete = False
    fields = (
        "name",
        "completed_display",
        "result_display",
        "attempts",
        "last_error",
        "recorded_at",
    )
    readonly_fields = fields

    @admin.display(description=_("completed"), boolean=True)
    def completed_display(self, step: Step) -> bool:
        return step.completed

    @admin.display(description=_("result"))
    def result_display(self, step: Step) -> str:
        return json_block(step.decoded_result(), empty=_("not completed"))


def held_count(request: HttpRequest) -> int:
    """Held runs, counted once per request (a range of the status index, not the history)."""
    cached: int | None = getattr(request, "_leasejobs_held", None)
    if cached is None:
        cached = Run.objects.held().count()
        request._leasejobs_held = cached  # type: ignore[attr-defined]
    return cached


#: What a run id looks like: a ULID, 26 characters of Crockford base32.
RUN_ID = re.compile(r"^[0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{26}$")


class HeldFilter(admin.SimpleListFilter):
    """Held runs wait for a human (A4): one click, with their number."""

    title = _("needs a decision")
    parameter_name = "held"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", _("Held runs (%(count)d)") % {"count": held_count(request)})]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run]:
        return queryset.filter(status=RunStatus.HELD) if self.value() == "yes" else queryset


class JobFilter(admin.SimpleListFilter):
    """Jobs from the registry: a DISTINCT over a million runs is not a filter's business."""

    title = _("job")
    parameter_name = "job"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        from .registry import registry

        return [(name, name) for name in registry.names()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run]:
        return queryset.filter(job=self.value()) if self.value() else queryset


@admin.register(Run)
class RunAdmin(GuardedActionsMixin, ReadOnlyMixin, RunModelAdmin):
    list_display = (
        "short_id",
        "job",
        "instance",
        "status_display",
        "progress_display",
        "attempts",
        "failure_display",
        "started_at",
        "updated_at",
        "ended_at",
        "duration_display",
        "lease_display",
    )
    list_filter = (HeldFilter, "status", JobFilter, "failure_code", "started_at")
    search_fields = ("id", "job", "instance")  # see get_search_results
    ordering = ("-id",)
    paginator = CappedCountPaginator
    show_full_result_count = False
    list_per_page = 50
    inlines = (StepInline,)
    actions = ("cancel_runs", "retry_runs", "release_resume", "release_fail")
    guarded_actions = actions
    fieldsets = (
        (None, {"fields": ("id", "job", "instance", "status_display", "progress_display")}),
        (
            _("Failure"),
            {"fields": ("failure_display", "failure_meaning", "attempts", "last_error_display")},
        ),
        (
            _("Data"),
            {"fields": ("payload_display", "cursor_display", "counters_display")},
        ),
        (
            _("Timing and lease"),
            {
                "fields": (
                    "started_at",
                    "updated_at",
                    "ended_at",
                    "duration_display",
                    "next_attempt_at",
                    "lease_display",
                    "lease_began_at",
                    "admission_misses",
                    "rerun_requested",
                )
            },
        ),
    )
    readonly_fields = (
        "id",
        "job",
        "instance",
        "status_display",
        "progress_display",
        "failure_display",
        "failure_meaning",
        "attempts",
        "last_error_display",
        "payload_display",
        "cursor_display",
        "counters_display",
        "started_at",
        "updated_at",
        "ended_at",
        "duration_display",
        "next_attempt_at",
        "lease_display",
        "lease_began_at",
        "admission_misses",
        "rerun_requested",
    )

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Run], search_term: str
    ) -> tuple[QuerySet[Run], bool]:
        """Search by exact run id, job or instance: each an index lookup.

        Django's default search is case-insensitive (``UPPER(...)`` or
        ``LIKE``), which no index serves: over a million runs it read the
        whole table, 0.6-0.9 s a page.
        """
        term = search_term.strip()
        if not term:
            return queryset, False
        if RUN_ID.match(term):
            return queryset.filter(pk=term.upper()), False
        return queryset.filter(Q(job=term) | Q(instance=term)), False

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return RunChangeList

    def get_inline_instances(self, request: HttpRequest, obj: Run | None = None) -> list[Any]:
        """The step ledger, unless its rows cannot be read back: then say why (SPEC §12)."""
        if obj is not None and unreadable(obj) is None:
            try:
                list(Step.objects.filter(run_id=obj.pk))
            except READ_ERRORS as exc:
                self.message_user(
                    request,
                    _("The step ledger cannot be read: %(reason)s")
                    % {"reason": unreadable_reason(exc)},
                    messages.WARNING,
                )
                return []
        return super().get_inline_instances(request, obj)

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Run | None:
        """The run, or a placeholder saying why it cannot be read back (SPEC §12).

        Django's own ``get_object`` reads a ``ValueError`` (SQLite's impossible
        date) as "no such run", and lets a ``DatabaseError`` through as a 500.
        """
        if "\x00" in object_id:
            return None  # PostgreSQL refuses NUL in text: no run has such an id
        queryset = self.get_queryset(request)
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
        if obj is None or reason is None:
            return super().render_change_form(request, context, add, change, form_url, obj)
        # The usual form would show a placeholder's blanks as values: show each column instead.
        return TemplateResponse(
            request,
            "admin/leasejobs/run/unreadable.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "title": _("View %s") % self.opts.verbose_name,
                "subtitle": obj.pk,
                "object_id": obj.pk,
                "reason": reason,
                "columns": read_columns(obj.pk),
            },
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

    @admin.display(description=_("id"), ordering="id")
    def short_id(self, run: Run) -> str:
        return run.pk

    @admin.display(description=_("status"), ordering="status")
    def status_display(self, run: Run) -> str:
        reason = unreadable(run)
        if reason is not None:
            return format_html(
                '<span class="leasejobs-unreadable">{} {}</span>',
                status_badge("unreadable", str(_("cannot be read"))),
                reason,
            )
        return status_badge(run.status, run.get_status_display())

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

    @admin.display(description=_("payload"))
    def payload_display(self, run: Run) -> str:
        return json_block(run.decoded_payload())

    @admin.display(description=_("cursor"))
    def cursor_display(self, run: Run) -> str:
        return json_block(run.decoded_cursor(), empty=_("no pass has committed yet"))

    @admin.display(description=_("counters"))
    def counters_display(self, run: Run) -> str:
        return json_block(run.decoded_counters())

    @admin.display(description=_("duration"))
    def duration_display(self, run: Run) -> str:
        return duration(run.started_at, run.ended_at)

    @admin.display(description=_("lease"))
    def lease_display(self, run: Run) -> str:
        return lease_text(run)

    # -- actions (A3): each a compare-and-set in the store -------------------------------

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("leasejobs.cancel_run")

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("leasejobs.retry_run")

    def has_release_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("leasejobs.release_run")

    @admin.action(description=_("Cancel selected runs"), permissions=["cancel"])
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        done = 0
        runs = read_robustly(queryset)
        for run in runs:
            if store.cancel(run.pk, by=_actor(request)):
                done += 1
                self.log_change(request, run, "Cancelled")
        report_outcome(
            self,
            request,
            done=done,
            asked=len(runs),
            verb=_("cancelled"),
            why=_("already finished"),
        )

    @admin.action(description=_("Retry selected runs (as new runs)"), permissions=["retry"])
    def retry_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        done = 0
        for run in read_robustly(queryset):
            reason = unreadable(run)
            if reason is not None:  # a new run would need the job and payload it cannot give
                self.message_user(
                    request,
                    _("%(run)s cannot be read (%(reason)s): nothing was started.")
                    % {"run": run.pk, "reason": reason},
                    messages.WARNING,
                )
                continue
            try:
                result = store.retry(run.pk, by=_actor(request))
            except RetryRefused as refused:  # live, done, or a payload that does not parse
                self.message_user(request, f"{run.pk}: {refused}", messages.WARNING)
                continue
            except JobNotRegistered as missing:
                _not_registered(self, request, missing.name, run=run.pk)
                continue
            if result.joined:
                self.message_user(
                    request,
                    _("%(run)s: joined the live run %(live)s of the same job and instance.")
                    % {"run": run.pk, "live": result.run.pk},
                    messages.INFO,
                )
                continue
            done += 1
            self.log_change(request, run, f"Retried as run {result.run.pk}")
        if done:
            self.message_user(
                request,
                ngettext("%(n)d run started again.", "%(n)d runs started again.", done)
                % {"n": done},
                messages.SUCCESS,
            )

    @admin.action(description=_("Release held runs: resume"), permissions=["release"])
    def release_resume(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        self._release(request, queryset, resume=True)

    @admin.action(description=_("Release held runs: fail"), permissions=["release"])
    def release_fail(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        self._release(request, queryset, resume=False)

    def _release(self, request: HttpRequest, queryset: QuerySet[Run], *, resume: bool) -> None:
        done = 0
        runs = read_robustly(queryset)
        for run in runs:
            if store.release(run.pk, resume=resume, by=_actor(request)):
                done += 1
                self.log_change(request, run, "Released: resumed" if resume else "Released: failed")
        verb = _("resumed") if resume else _("failed")
        report_outcome(self, request, done=done, asked=len(runs), verb=verb, why=_("not held"))


# -- schedules -----------------------------------------------------------------------------


@admin.register(Schedule)
class ScheduleAdmin(GuardedActionsMixin, ReadOnlyMixin, ScheduleModelAdmin):
    list_display = (
        "job",
        "cron_display",
        "timezone",
        "state_display",
        "next_due_at",
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
        "next_due_at",
        "paused_display",
        "last_run_display",
        "last_success_at",
        "recent_runs",
        "missed_ledger",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Schedule]:
        since = timezone.now() - timedelta(hours=24)
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

    @admin.display(description=_("cron"))
    def cron_display(self, row: Schedule) -> str:
        return cron_in_words(row.expression)

    @admin.display(description=_("state"))
    def state_display(self, row: Schedule) -> str:
        live = self.live_run(row)
        reason = None if live is None else unreadable(live)
        if reason is not None:  # its state turns on when the run began, which cannot be read
            badge = status_badge("unreadable", str(_("live run cannot be read")))
            return format_html("{} {}", badge, reason)
        current = schedules.state(row, live, timezone.now())
        badge = status_badge(current, current.replace("_", " "))
        why = schedules.problem(row) if current == schedules.State.INVALID else None
        return format_html("{} {}", badge, why) if why else badge

    @admin.display(description=_("last run"))
    def last_run_display(self, row: Schedule) -> str:
        if row.last_run_id is None:
            return "—"
        return f"{row.last_run_at:%Y-%m-%d %H:%M} · {row.last_outcome or 'running'}"

    @admin.display(description=_("missed (24 h)"), ordering="missed_24h")
    def missed_24h(self, row: Schedule) -> int:
        return int(getattr(row, "missed_24h", 0))

    @admin.display(description=_("paused"))
    def paused_display(self, row: Schedule) -> str:
        if row.paused_at is None:
            return "—"
        note = f": {row.pause_note}" if row.pause_note else ""
        return f"{row.paused_by} at {row.paused_at:%Y-%m-%d %H:%M}{note}"

    @admin.display(description=_("recent runs"))
    def recent_runs(self, row: Schedule) -> str:
        shown = Run.objects.only("id", "status", "started_at", "ended_at", "failure_code")
        runs = read_robustly(shown.filter(job=row.job).order_by("-id")[:20], shown)
        return table(
            [_("run"), _("status"), _("started"), _("ended"), _("failure")],
            rows=[
                (
                    run.pk,
                    _cannot_be_read(run) or run.status,
                    run.started_at or "—",
                    run.ended_at or "—",
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
            rows=[(m.due_at, m.cause, m.action, m.run_id or "—", m.recorded_at) for m in ledger],
        )

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
                {
                    **self.admin_site.each_context(request),
                    "opts": self.model._meta,
                    "schedules": queryset,
                    "note_max": schedules.NOTE_MAX,
                    "title": _("Pause schedules"),
                },
            )
        note = request.POST.get("note", "")[: schedules.NOTE_MAX]
        done = asked = 0
        for row in queryset:
            try:
                # Refused as resume and run now are: this admin could not undo the pause.
                get_job(row.job)
            except JobNotRegistered:
                _not_registered(self, request, row.job)
                continue
            asked += 1
            if schedules.pause(row.job, _actor(request), note).done:
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
                result = schedules.resume(row.job, _actor(request))
            except JobNotRegistered:  # refused before anything was written
                _not_registered(self, request, row.job)
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
                result = schedules.run_now(row.job, _actor(request))
            except schedules.RunNowRefused as refused:
                self.message_user(request, f"{row.job}: {refused}", messages.WARNING)
                continue
            except JobNotRegistered:
                _not_registered(self, request, row.job)
                continue
            self.log_change(request, row, f"Run now: run {result.run.pk}")
            self.message_user(request, f"{row.job}: started run {result.run.pk}", messages.SUCCESS)


@admin.register(Missed)
class MissedAdmin(ReadOnlyMixin, MissedModelAdmin):
    list_display = ("job", "due_at", "cause", "action", "run_link", "recorded_at")
    list_filter = ("cause", "action")
    search_fields = ("=job",)
    ordering = ("-due_at",)
    paginator = CappedCountPaginator
    show_full_result_count = False
    fields = ("job", "due_at", "cause", "action", "run_link", "recorded_at")
    readonly_fields = fields

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return SafeChangeList

    @admin.display(description=_("run"), ordering="run_id")
    def run_link(self, row: Missed) -> str:
        """The run's id, from the row itself: joining would read every run's payload."""
        if row.run_id is None:
            return "—"
        url = reverse(f"{self.admin_site.name}:leasejobs_run_change", args=[quote(row.run_id)])
        return format_html('<a href="{}">{}</a>', url, row.run_id)
