"""The run page's buttons (A7, A3): the actions valid for that run, each behind a confirmation.

Cancel (a run holding its key), Retry (a failed or cancelled run: a NEW run)
and Release: resume / Release: fail (a held run), shown only to a user with
the permission the list's action asks for. A button is a link to a
confirmation page; only its form's POST, with the CSRF token, acts -- a GET
never does -- and it acts through :class:`~.run_actions.RunActions`' verbs,
which call the operator functions, log the ``LogEntry`` and say "already"
when another operator acted first. A POST without the permission is a 403.

A row the database cannot give back whole still offers Cancel when it holds
its key (§3, §11): that is decided by an ``IS NOT NULL`` the database
answers without reading the value back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.functional import Promise
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from django_leasejobs import operators
from django_leasejobs.models import Run
from django_leasejobs.states import LIVE_STATUSES, RunStatus
from django_leasejobs.store.base import runs

from .common import page_context
from .held import in_flight_banner, runs_again
from .reading import unreadable
from .run_actions import RunActions

__all__ = ["PAGE_ACTIONS", "PageAction", "RunPage", "valid_actions"]


@dataclass(frozen=True)
class PageAction:
    """One button of the run page, and its confirmation."""

    verb: str  # its URL: <run>/<verb>/
    label: Promise  # the button
    permission: str  # as the list's action: has_<permission>_permission
    question: Promise  # the confirmation's title, of %(run)s
    explanation: Promise  # what happens, said before it does
    confirm: Promise  # the confirming button
    ends_work: bool = False  # its button stands apart, as Delete does
    asks_reason: bool = False  # its confirmation asks why (optional), kept with the run


PAGE_ACTIONS = {
    action.verb: action
    for action in (
        PageAction(
            "cancel",
            gettext_lazy("Cancel"),
            "cancel",
            gettext_lazy("Cancel run %(run)s?"),
            gettext_lazy(
                "The run becomes cancelled and no new pass of it begins. A pass in flight "
                "finds its next write refused and stops; until it has stopped, or its lease "
                "has expired, the run keeps its job and instance, so nothing starts beside it."
            ),
            gettext_lazy("Yes, cancel it"),
            ends_work=True,
        ),
        PageAction(
            "retry",
            gettext_lazy("Retry"),
            "retry",
            gettext_lazy("Retry run %(run)s as a new run?"),
            gettext_lazy(
                "A NEW run starts with the same job, instance and payload, from the beginning: "
                "it does not inherit this run's cursor, counters or steps. This run stays as "
                "it is. If the job and instance have a live run by now, that run is joined."
            ),
            gettext_lazy("Yes, start it again"),
        ),
        PageAction(
            "release-resume",
            gettext_lazy("Release: resume"),
            "release",
            gettext_lazy("Resume held run %(run)s?"),
            gettext_lazy(
                "The run becomes running and due now: the next drive runs the interrupted "
                "pass again from the same cursor. Completed steps return their recorded "
                "result; the step that was in flight runs again."
            ),
            gettext_lazy("Yes, resume it"),
        ),
        PageAction(
            "release-fail",
            gettext_lazy("Release: fail"),
            "release",
            gettext_lazy("Fail held run %(run)s?"),
            gettext_lazy(
                "The run becomes failed (\u201cinterrupted; failed by\u201d your user name, "
                "and your reason if you give one, become its last error) and nothing runs it "
                "again. It can still be retried later, as a new run."
            ),
            gettext_lazy("Yes, fail it"),
            ends_work=True,
            asks_reason=True,
        ),
    )
}


def valid_actions(run: Run) -> list[str]:
    """The verbs of :data:`PAGE_ACTIONS` valid for *run* as read, in the buttons' order."""
    if unreadable(run) is not None:
        # Nothing but its key matters to a cancel, and the database tests that column itself.
        return ["cancel"] if runs().cancellable().filter(pk=run.pk).exists() else []
    verbs = []
    if run.status in LIVE_STATUSES or (
        run.live_key is not None and run.status != RunStatus.CANCELLED
    ):
        verbs.append("cancel")
    if run.status in (RunStatus.FAILED, RunStatus.CANCELLED):
        verbs.append("retry")
    if run.status == RunStatus.HELD:
        verbs += ["release-resume", "release-fail"]
    return verbs


class RunPage(RunActions):
    """The run page's buttons and their confirmation pages."""

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        view = self.admin_site.admin_view(self.run_action_view)  # login, staff, CSRF
        mine = [
            path(f"<path:object_id>/{verb}/", view, {"verb": verb}, name=f"{info[0]}_{info[1]}_act")
            for verb in PAGE_ACTIONS
        ]
        return mine + list(super().get_urls())  # before Django's "<id>/" catch-all

    def _may(self, request: HttpRequest, action: PageAction) -> bool:
        permitted: Callable[[HttpRequest], bool] = getattr(
            self, f"has_{action.permission}_permission"
        )
        return self.has_view_or_change_permission(request) and permitted(request)

    def page_buttons(self, request: HttpRequest, run: Run) -> list[dict[str, Any]]:
        """The buttons *run*'s page shows to this user: valid for the run, and permitted."""
        return [
            {
                "verb": verb,
                "label": PAGE_ACTIONS[verb].label,
                "url": self._url(run.pk, verb),
                "ends_work": PAGE_ACTIONS[verb].ends_work,
            }
            for verb in valid_actions(run)
            if self._may(request, PAGE_ACTIONS[verb])
        ]

    def _url(self, pk: str, verb: str) -> str:
        name = f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_act"
        return reverse(name, kwargs={"object_id": quote(pk), "verb": verb})

    def _change_url(self, pk: str) -> str:
        name = f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_change"
        return reverse(name, args=[quote(pk)])

    def run_action_view(self, request: HttpRequest, object_id: str, verb: str) -> HttpResponse:
        """GET: the confirmation of *verb* on the run. POST: do it, say how it went, go back."""
        action = PAGE_ACTIONS.get(verb)
        if action is None:
            raise Http404
        if not self._may(request, action):
            raise PermissionDenied
        if request.method not in ("GET", "HEAD", "POST"):
            return HttpResponse(status=405, headers={"Allow": "GET, HEAD, POST"})
        run = self.get_object(request, unquote(object_id))
        if run is None:
            self.message_user(
                request,
                _("There is no run %(run)s: nothing was done.") % {"run": unquote(object_id)},
                messages.WARNING,
            )
            name = f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_changelist"
            return HttpResponseRedirect(reverse(name))
        back = HttpResponseRedirect(self._change_url(run.pk))
        reason = request.POST.get("reason", "").strip() if action.asks_reason else ""
        error = None
        if request.method == "POST" and len(reason) > operators.NOTE_MAX:
            error = _("A reason is at most %(n)d characters.") % {"n": operators.NOTE_MAX}
        elif request.method == "POST":
            # Whatever the page showed: the operator function's compare-and-set decides.
            self._act(request, run, action, reason)
            return back
        if verb not in valid_actions(run):  # a page or a bookmark older than the run's state
            self.message_user(
                request,
                _("%(action)s is not possible for run %(run)s as it is now (%(status)s).")
                % {"action": action.label, "run": run.pk, "status": run.status},
                messages.WARNING,
            )
            return back
        return TemplateResponse(
            request,
            "admin/leasejobs/run/confirm.html",
            page_context(
                self,
                request,
                title=action.question % {"run": run.pk},
                action=action,
                run=run,
                reason=unreadable(run),
                change_url=self._change_url(run.pk),
                note=reason,
                note_max=operators.NOTE_MAX,
                error=error,
                # A8: which step runs again, or which one the pass stopped in.
                in_flight=runs_again(run) if verb == "release-resume" else in_flight_banner(run),
            ),
        )

    def _act(self, request: HttpRequest, run: Run, action: PageAction, reason: str) -> None:
        pk = run.pk
        if action.verb == "cancel":
            if self.cancel_one(request, run):
                message = _("Run %(run)s cancelled.") % {"run": pk}
                self.message_user(request, message, messages.SUCCESS)
            else:
                self.message_user(
                    request,
                    _(
                        "Run %(run)s was not cancelled: it had already finished or been "
                        "cancelled (another operator may have acted first)."
                    )
                    % {"run": pk},
                    messages.WARNING,
                )
        elif action.verb == "retry":
            result = self.retry_one(request, run)  # says itself why not
            if result is not None:
                self.message_user(request, self.started_again(run, result), messages.SUCCESS)
        else:
            resume = action.verb == "release-resume"
            if self.release_one(request, run, resume=resume, note=reason):
                text = (
                    _("Run %(run)s resumed: it is running and due now.")
                    if resume
                    else _("Run %(run)s failed.")
                )
                self.message_user(request, text % {"run": pk}, messages.SUCCESS)
            else:
                self.message_user(
                    request,
                    _(
                        "Run %(run)s was not released: it is not held any more (another "
                        "operator may have decided it already)."
                    )
                    % {"run": pk},
                    messages.WARNING,
                )
