"""The run list's filters (A1, A4): held runs first, jobs from the registry."""

from __future__ import annotations

import re
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from django_leasejobs.models import Run
from django_leasejobs.registry import registry
from django_leasejobs.states import RunStatus

__all__ = ["RUN_ID", "HeldFilter", "JobFilter", "QueueFilter", "held_count"]


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
        return [(name, name) for name in registry.names()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run]:
        return queryset.filter(job=self.value()) if self.value() else queryset


class QueueFilter(admin.SimpleListFilter):
    """The queues the registered jobs name (W4): again no DISTINCT over the history.

    A queue given only to ``start()`` is not listed, but ``?queue=NAME``
    still filters by it.
    """

    title = _("queue")
    parameter_name = "queue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in sorted({spec.queue for spec in registry})]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run]:
        return queryset.filter(queue=self.value()) if self.value() else queryset
