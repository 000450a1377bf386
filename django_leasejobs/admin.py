"""Admin registration: runs and their steps, read-only.

Operators read runs here; nothing the protocol owns (payload, cursor, lease)
can be edited by a form (SPEC A6). The operator actions of SPEC §8 call the
store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.http import HttpRequest

from .models import Missed, Run, Schedule, Step

if TYPE_CHECKING:
    RunModelAdmin = admin.ModelAdmin[Run]
    StepTabularInline = admin.TabularInline[Step, Run]
else:  # The admin classes are not subscriptable at runtime.
    RunModelAdmin = admin.ModelAdmin
    StepTabularInline = admin.TabularInline


class StepInline(StepTabularInline):
    model = Step
    extra = 0
    can_delete = False
    fields = ("name", "result", "attempts", "last_error", "recorded_at")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Run)
class RunAdmin(RunModelAdmin):
    list_display = (
        "id",
        "job",
        "instance",
        "status",
        "attempts",
        "failure_code",
        "started_at",
        "updated_at",
        "ended_at",
    )
    list_filter = ("status", "failure_code")
    search_fields = ("=id", "job", "instance")
    ordering = ("-id",)
    show_full_result_count = False
    inlines = (StepInline,)

    def get_readonly_fields(self, request: HttpRequest, obj: Run | None = None) -> list[str]:
        return [field.name for field in Run._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


if TYPE_CHECKING:
    ScheduleModelAdmin = admin.ModelAdmin[Schedule]
    MissedModelAdmin = admin.ModelAdmin[Missed]
else:
    ScheduleModelAdmin = admin.ModelAdmin
    MissedModelAdmin = admin.ModelAdmin


class ReadOnlyMixin:
    """The protocol owns these rows: operators read them, actions change them."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Schedule)
class ScheduleAdmin(ReadOnlyMixin, ScheduleModelAdmin):
    list_display = (
        "job",
        "expression",
        "timezone",
        "rule",
        "next_due_at",
        "enabled",
        "paused_at",
        "paused_by",
        "last_run_at",
        "last_outcome",
    )
    list_filter = ("enabled", "rule")
    search_fields = ("job",)
    ordering = ("job",)


@admin.register(Missed)
class MissedAdmin(ReadOnlyMixin, MissedModelAdmin):
    list_display = ("job", "due_at", "cause", "action", "run", "recorded_at")
    list_filter = ("cause", "action", "job")
    ordering = ("-due_at",)
    list_select_related = ("run",)
    show_full_result_count = False
