"""What the admin's pages share: read-only rows, guarded actions, lookups that
cannot be run, and how an action reports what it did (A3, A6)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import django
from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ERROR_FLAG, ChangeList
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from django_leasejobs.models import Missed, Run, Schedule, Step

from .reading import unreadable

if TYPE_CHECKING:
    RunModelAdmin = admin.ModelAdmin[Run]
    ScheduleModelAdmin = admin.ModelAdmin[Schedule]
    MissedModelAdmin = admin.ModelAdmin[Missed]
    StepTabularInline = admin.TabularInline[Step, Run]
else:  # The admin classes are not subscriptable at runtime.
    RunModelAdmin = ScheduleModelAdmin = MissedModelAdmin = admin.ModelAdmin
    StepTabularInline = admin.TabularInline


#: Whether the running admin styles ``<ol class="breadcrumbs">``: Django 6.1 moved its
#: breadcrumbs from ``<div class="breadcrumbs">`` to a list, and its CSS names the element.
OL_BREADCRUMBS = django.VERSION >= (6, 1)


def page_context(model_admin: Any, request: HttpRequest, **context: Any) -> dict[str, Any]:
    """The context of one of this app's own admin pages (a confirmation, a row it cannot read).

    The site's context and the model's options, and which breadcrumbs markup
    the running admin styles (``admin/leasejobs/includes/breadcrumbs.html``).
    """
    return {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.model._meta,
        "leasejobs_ol_breadcrumbs": OL_BREADCRUMBS,
        **context,
    }


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


def actor(request: HttpRequest) -> str:
    return str(request.user.get_username())


def cannot_be_read(run: Run) -> str | None:
    reason = unreadable(run)
    return None if reason is None else _("cannot be read: %(reason)s") % {"reason": reason}


def not_registered(model_admin: Any, request: HttpRequest, job: str, run: str = "") -> None:
    """Refuse an action on a job this process does not register (D2): it would run nowhere."""
    message = _("%(job)s is not registered in this process: nothing was changed.") % {"job": job}
    model_admin.message_user(request, f"{run}: {message}" if run else message, messages.WARNING)
