"""The run list's actions (A3): cancel, retry, release -- each through
:mod:`django_leasejobs.operators`."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from django_leasejobs import operators
from django_leasejobs.exceptions import JobNotRegistered, RetryRefused
from django_leasejobs.models import Run

from .common import (
    RunModelAdmin,
    actor,
    not_registered,
    report_outcome,
)
from .reading import read_robustly, unreadable


class RunActions(RunModelAdmin):
    """The run list's actions (A3): each one a compare-and-set, reported and logged."""

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
            if operators.cancel(run.pk, by=actor(request)):
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
                result = operators.retry(run.pk, by=actor(request))
            except RetryRefused as refused:  # live, done, or a payload that does not parse
                self.message_user(request, f"{run.pk}: {refused}", messages.WARNING)
                continue
            except JobNotRegistered as missing:
                not_registered(self, request, missing.name, run=run.pk)
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
            if operators.release(run.pk, resume=resume, by=actor(request)):
                done += 1
                self.log_change(request, run, "Released: resumed" if resume else "Released: failed")
        verb = _("resumed") if resume else _("failed")
        report_outcome(self, request, done=done, asked=len(runs), verb=verb, why=_("not held"))
