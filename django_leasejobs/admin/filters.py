"""The run list's filters (A1, A4): held runs first, jobs from the registry, recent tasks."""

from __future__ import annotations

import re
from typing import Any, cast

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from django_leasejobs.errors import READ_ERRORS
from django_leasejobs.ids import ID_PATTERN
from django_leasejobs.models import Run
from django_leasejobs.querysets import RunQuerySet
from django_leasejobs.registry import registry
from django_leasejobs.tasks.aliases import our_aliases
from django_leasejobs.tasks.options import TASK_JOB

__all__ = [
    "RECENT_TASK_RUNS",
    "RUN_ID",
    "HeldFilter",
    "JobFilter",
    "QueueFilter",
    "TaskFilter",
    "held_count",
]


def held_count(request: HttpRequest) -> int:
    """Held runs, counted once per request (a range of the status index, not the history)."""
    cached: int | None = getattr(request, "_leasejobs_held", None)
    if cached is None:
        cached = Run.objects.held().count()
        request._leasejobs_held = cached  # type: ignore[attr-defined]
    return cached


#: What a run id looks like: a ULID, 26 characters of Crockford base32.
RUN_ID = re.compile(rf"^{ID_PATTERN}$", re.IGNORECASE | re.ASCII)
#: How many of the latest task runs the task filter takes its paths from.
RECENT_TASK_RUNS = 1_000


class HeldFilter(admin.SimpleListFilter):
    """Held runs wait for a human (A4): one click, with their number."""

    title = _("needs a decision")
    parameter_name = "held"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", _("Held runs (%(count)d)") % {"count": held_count(request)})]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run]:
        return cast("RunQuerySet[Run]", queryset).held() if self.value() == "yes" else queryset


class ThrottledFilter(admin.SimpleListFilter):
    """Runs waiting for their job's limit (C5): what the overview's "throttled" links to."""

    title = _("flow control")
    parameter_name = "throttled"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", str(_("Throttled runs")))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run]:
        if self.value() != "yes":
            return queryset
        return cast("RunQuerySet[Run]", queryset).throttled()


class JobFilter(admin.SimpleListFilter):
    """Jobs from the registry: a DISTINCT over a million runs is not a filter's business."""

    title = _("job")
    parameter_name = "job"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in registry.names()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run]:
        return queryset.filter(job=self.value()) if self.value() else queryset


class QueueFilter(admin.SimpleListFilter):
    """The queues the registered jobs name (W4), and the ``QUEUES`` of the task
    backends on ours (SPEC §9): again no DISTINCT over the history.

    A queue given only to ``start()`` is not listed, but ``?queue=NAME``
    still filters by it.
    """

    title = _("queue")
    parameter_name = "queue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        named = {spec.queue for spec in registry}
        for _alias, params in our_aliases():
            named |= {queue for queue in params.get("QUEUES", ()) if isinstance(queue, str)}
        return [(name, name) for name in sorted(named)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run]:
        return queryset.filter(queue=self.value()) if self.value() else queryset


class TaskFilter(admin.SimpleListFilter):
    """The tasks of the latest task runs: again no DISTINCT over the history.

    The paths are the ``instance`` of the last ``RECENT_TASK_RUNS`` task runs,
    read newest first along the ``(job, id)`` index: a bounded read however
    many runs are retained. A task not run lately is not listed, but
    ``?task=PATH`` still filters by it (and is then listed).
    """

    title = _("task")
    parameter_name = "task"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        paths = set(self._recent_paths())
        if self.value():
            paths.add(str(self.value()))
        return [(path, path) for path in sorted(paths)]

    def _recent_paths(self) -> list[str]:
        if TASK_JOB not in registry:
            return []  # no task backend here: nothing to read on every page load
        latest = Run.objects.filter(job=TASK_JOB).order_by("-id")
        try:
            return list(latest.values_list("instance", flat=True)[:RECENT_TASK_RUNS])
        except READ_ERRORS:
            return []  # a path that cannot be read back (SPEC §12): a filter is not worth a 500

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run]:
        value = self.value()
        return queryset.filter(job=TASK_JOB, instance=value) if value else queryset
