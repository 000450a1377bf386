"""The run actions (A3): cancel, retry, release -- each through :mod:`django_leasejobs.operators`.

One run at a time, each verb here is what both the list's action menu and
the run page's buttons (:mod:`.run_page`) do: the same operator function,
the same permission, the same ``LogEntry``. The list reports a count; the
page one sentence.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin.utils import quote
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from django_leasejobs import operators
from django_leasejobs.exceptions import JobNotRegistered, RetryRefused
from django_leasejobs.models import Run
from django_leasejobs.store import StartResult

from .common import (
    RunModelAdmin,
    actor,
    not_registered,
    report_outcome,
)
from .reading import read_robustly, unreadable

#: How many runs a list retry names one by one, each with a link to its new run.
LINKED_MAX = 10


class RunActions(RunModelAdmin):
    """The run actions (A3): each one a compare-and-set, reported and logged."""

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("leasejobs.cancel_run")

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("leasejobs.retry_run")

    def has_release_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("leasejobs.release_run")

    # -- one run: what the list and the page both do -----------------------------------

    def cancel_one(self, request: HttpRequest, run: Run) -> bool:
        """Cancel *run* and log it; ``False`` when it had already finished."""
        if not operators.cancel(run.pk, by=actor(request)):
            return False
        self.log_change(request, run, "Cancelled")
        return True

    def retry_one(self, request: HttpRequest, run: Run) -> StartResult | None:
        """Start *run* again as a new run and log it; ``None`` when it was not (said why).

        A refusal (live, done, unreadable, a job not registered here) and a
        join of the live run another operator's retry started are reported
        here, as warnings and information.
        """
        reason = unreadable(run)
        if reason is not None:  # a new run would need the job and payload it cannot give
            self.message_user(
                request,
                _("%(run)s cannot be read (%(reason)s): nothing was started.")
                % {"run": run.pk, "reason": reason},
                messages.WARNING,
            )
            return None
        try:
            result = operators.retry(run.pk, by=actor(request))
        except RetryRefused as refused:  # live, done, or a payload that does not parse
            self.message_user(request, f"{run.pk}: {refused}", messages.WARNING)
            return None
        except JobNotRegistered as missing:
            not_registered(self, request, missing.name, run=run.pk)
            return None
        if result.joined:
            self.message_user(
                request,
                format_html(
                    _("{}: joined the live run {} of the same job and instance."),
                    run.pk,
                    self.run_link(result.run.pk),
                ),
                messages.INFO,
            )
            return None
        self.log_change(request, run, f"Retried as run {result.run.pk}")
        return result

    def release_one(self, request: HttpRequest, run: Run, *, resume: bool, note: str = "") -> bool:
        """Resume or fail held *run* and log it; ``False`` when it was not held any more.

        A failure's *note* (the operator's reason) goes into the run's last
        error and the log entry.
        """
        if not operators.release(run.pk, resume=resume, by=actor(request), note=note):
            return False
        logged = "Released: resumed" if resume else "Released: failed"
        self.log_change(request, run, f"{logged} ({note})" if note and not resume else logged)
        return True

    def run_link(self, pk: str) -> SafeString:
        """A link to run *pk*'s page, its id as the text."""
        url = reverse(
            f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_change",
            args=[quote(pk)],
        )
        return format_html('<a href="{}">{}</a>', url, pk)

    def started_again(self, run: Run, result: StartResult) -> SafeString:
        """Say "Run X started again as run Y.", Y a link to the new run (safe, for messages)."""
        return format_html(
            _("Run {} started again as run {}."), run.pk, self.run_link(result.run.pk)
        )

    # -- the list's actions ---------------------------------------------------------------

    @admin.action(description=gettext_lazy("Cancel selected runs"), permissions=["cancel"])
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        runs = read_robustly(queryset)
        done = sum(self.cancel_one(request, run) for run in runs)
        report_outcome(
            self,
            request,
            done=done,
            asked=len(runs),
            verb=_("cancelled"),
            why=_("already finished"),
        )

    @admin.action(
        description=gettext_lazy("Retry selected runs (as new runs)"), permissions=["retry"]
    )
    def retry_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        started: list[tuple[Run, StartResult]] = []
        for run in read_robustly(queryset):
            result = self.retry_one(request, run)
            if result is not None:
                started.append((run, result))
        if not started:
            return
        self.message_user(
            request,
            ngettext("%(n)d run started again.", "%(n)d runs started again.", len(started))
            % {"n": len(started)},
            messages.SUCCESS,
        )
        for run, result in started[:LINKED_MAX]:  # where each went, one click away
            self.message_user(request, self.started_again(run, result), messages.INFO)
        if len(started) > LINKED_MAX:
            more = len(started) - LINKED_MAX
            self.message_user(
                request,
                ngettext(
                    "… and %(n)d more: see the newest runs.",
                    "… and %(n)d more: see the newest runs.",
                    more,
                )
                % {"n": more},
                messages.INFO,
            )

    @admin.action(description=gettext_lazy("Release held runs: resume"), permissions=["release"])
    def release_resume(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        self._release(request, queryset, resume=True)

    @admin.action(description=gettext_lazy("Release held runs: fail"), permissions=["release"])
    def release_fail(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        self._release(request, queryset, resume=False)

    def _release(self, request: HttpRequest, queryset: QuerySet[Run], *, resume: bool) -> None:
        runs = read_robustly(queryset)
        done = sum(self.release_one(request, run, resume=resume) for run in runs)
        verb = _("resumed") if resume else _("failed")
        report_outcome(self, request, done=done, asked=len(runs), verb=verb, why=_("not held"))
