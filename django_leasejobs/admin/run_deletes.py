"""Deleting runs from the admin (A7): finished runs delete freely; a live one is refused.

A run that holds its coalescing key -- running, held, or cancelled while its
pass is still in flight (§3) -- is never deleted from here, neither by the
change page's Delete nor by the list's "Delete selected runs": freeing its key
while a pass of it may run would let a ``start()`` of the same (job, instance)
make a second run beside that pass (R1). The operator is told why and pointed
to cancel. The delete itself is :func:`~django_leasejobs.store.deletes.delete_finished`,
whose ``DELETE`` tests the key again, so a page loaded a moment earlier
decides nothing.
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib import admin, messages
from django.contrib.admin.actions import delete_selected as confirm_delete_selected
from django.contrib.admin.utils import model_ngettext, quote, unquote
from django.db import router, transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.decorators import method_decorator
from django.utils.translation import gettext as django_gettext
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext, ngettext_lazy
from django.views.decorators.csrf import csrf_protect

from django_leasejobs.models import Run
from django_leasejobs.querysets import RunQuerySet
from django_leasejobs.states import RunStatus
from django_leasejobs.store.deletes import delete_finished, free_of_key, with_live_key

from .common import RunModelAdmin
from .reading import read_robustly

__all__ = ["RunDeletes"]

_LIVE = ngettext_lazy(
    "%(n)d run is live and was not deleted: a pass of it may be running. "
    "Cancel it first (Cancel selected runs); once it has finished it can be deleted.",
    "%(n)d runs are live and were not deleted: a pass of each may be running. "
    "Cancel them first (Cancel selected runs); once they have finished they can be deleted.",
    "n",
)
_STOPPING = ngettext_lazy(
    "%(n)d cancelled run was not deleted: its pass may still be running. "
    "Delete it once that pass has stopped or its lease has expired.",
    "%(n)d cancelled runs were not deleted: their passes may still be running. "
    "Delete them once those passes have stopped or their leases have expired.",
    "n",
)


class NotDeleted(Exception):
    """The run held its key when the delete ran, or was gone: nothing was deleted."""


def refusal(run: Run) -> str:
    """Why *run*, which holds its key, is not deleted, and what to do instead.

    Said on the run's own page (the refused delete goes back to it), whose
    summary offers Cancel: the way is that button, not the list's action.
    """
    if run.status == RunStatus.CANCELLED:
        text = _(
            "Run %(run)s was cancelled, but its pass may still be running, so it was not "
            "deleted: deleting it now would let a second run of the same job and instance "
            "start beside that pass. Delete it once the pass has stopped or its lease has "
            "expired."
        )
    else:
        text = _(
            "Run %(run)s is live, so it was not deleted: a pass of it may be running, and "
            "deleting it would let a second run of the same job and instance start beside "
            "that pass. Cancel it first, with the Cancel button on this page; once it has "
            "finished it can be deleted."
        )
    return text % {"run": run.pk}


class RunDeletes(RunModelAdmin):
    """Delete for finished runs only, on the change page and in the action menu (A7)."""

    def has_delete_permission(self, request: HttpRequest, obj: Run | None = None) -> bool:
        """The model permission, and for a run that holds its key none: no Delete button."""
        if obj is not None and obj.live_key is not None:
            return False
        return super().has_delete_permission(request, obj)

    @method_decorator(csrf_protect)  # as Django's: a refusal, too, answers only its own forms
    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: Any = None
    ) -> HttpResponse:
        """Django's delete page for a finished run; for a live one, why not and a way back."""
        pk = unquote(object_id)
        run = self.get_object(request, pk)
        if run is not None and run.live_key is not None and super().has_delete_permission(request):
            return self._refused(request, pk, refusal(run))
        try:
            response: HttpResponse = super().delete_view(request, object_id, extra_context)
        except NotDeleted:  # raised inside the view's transaction: its LogEntry went with it
            message = _("Run %(run)s was not deleted: it is live now, or it is no longer stored.")
            return self._refused(request, pk, message % {"run": pk})
        return response

    def _refused(self, request: HttpRequest, pk: str, message: str) -> HttpResponseRedirect:
        """Say *message*, and go back to run *pk*'s page."""
        self.message_user(request, message, messages.WARNING)
        name = f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_change"
        return HttpResponseRedirect(reverse(name, args=[quote(pk)]))

    def delete_model(self, request: HttpRequest, obj: Run) -> None:
        """Delete *obj* only if it holds no key when the ``DELETE`` runs; else :exc:`NotDeleted`."""
        if not delete_finished([obj.pk]):
            raise NotDeleted(obj.pk)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        """Delete the runs of *queryset* that hold no key; never ``queryset.delete()``."""
        delete_finished(list(queryset.values_list("pk", flat=True)))

    @admin.action(description=_("Delete selected %(verbose_name_plural)s"), permissions=["delete"])
    def delete_selected(self, request: HttpRequest, queryset: QuerySet[Run]) -> HttpResponse | None:
        """Django's "Delete selected", for the finished runs only; the live ones are reported.

        The confirmation page is Django's own, given only the runs that will be
        deleted, so it never promises to delete a live one; the confirmed
        delete is :func:`delete_finished`'s, and says how many went.
        """
        self._report_live(request, with_live_key(queryset))
        finished = free_of_key(queryset)
        if not finished.exists():
            return None
        if not request.POST.get("post"):
            return confirm_delete_selected(self, request, finished)
        self._delete_confirmed(request, finished)
        return None  # back to the list, as Django's action goes

    def _report_live(self, request: HttpRequest, keyed: QuerySet[Run]) -> None:
        found = cast("RunQuerySet[Run]", keyed).live_and_stopping()
        for n, message in ((found["live"], _LIVE), (found["stopping"], _STOPPING)):
            if n:
                self.message_user(request, message % {"n": n}, messages.WARNING)

    def _delete_confirmed(self, request: HttpRequest, finished: QuerySet[Run]) -> None:
        # What the log entries name (job, instance, id, status), not the payloads.
        runs = read_robustly(finished.only("id", "job", "instance", "status"))
        # The entries and the delete together, as Django's delete page does them.
        with transaction.atomic(using=router.db_for_write(Run)):
            deleted = set(delete_finished([run.pk for run in runs]))
            gone = [run for run in runs if run.pk in deleted]
            if gone:
                self.log_deletions(request, gone)  # type: ignore[arg-type]  # any iterable
        if gone:
            self.message_user(
                request,
                # Django's own message, in Django's own translations.
                django_gettext("Successfully deleted %(count)d %(items)s.")
                % {"count": len(gone), "items": model_ngettext(self.opts, len(gone))},
                messages.SUCCESS,
            )
        kept = len(runs) - len(gone)
        if kept:
            self.message_user(
                request,
                ngettext(
                    "%(n)d run was not deleted: it became live or was already deleted.",
                    "%(n)d runs were not deleted: they became live or were already deleted.",
                    kept,
                )
                % {"n": kept},
                messages.WARNING,
            )
