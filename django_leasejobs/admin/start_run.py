"""Start a run from the admin (A9): the run list's Add, a job chooser, then the job's form.

The admin's own add view (``admin:leasejobs_run_add``) for users with
``leasejobs.add_run``. Without ``?job=NAME`` it asks which registered job to
start (the built-in task job is not offered: a task is enqueued with its
arguments, SPEC §9); with it, the job's page: ``instance`` (default
``"default"``), then the job's ``form`` (``@job(form=...)``, §3) -- its
fields keep their own names beside the page's -- or, for a job without one,
``payload`` as JSON, and ``again``. Every value is held to R2 before anything
is written: a form field whose cleaned value a run cannot carry (a date, a
``Decimal``, a model instance) is refused on that field, and the page is
shown again. A job not safe to repeat asks for a confirmation, a second page
that carries the values in hidden fields. Then it calls
:func:`~django_leasejobs.start` (R1: a live run of the same job and
instance is joined, and the message links it), records a ``LogEntry`` and
goes to the run's page.

Nothing else here creates a run, and no run is ever edited through a form
(A6): the model form Django's add view would show is never built.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth import get_permission_codename
from django.core.exceptions import PermissionDenied
from django.db import router, transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

from django_leasejobs.exceptions import (
    DatabaseFull,
    InvalidKey,
    JobNotRegistered,
    NotQueueSafe,
    StartContended,
)
from django_leasejobs.models import Run
from django_leasejobs.registry import Job
from django_leasejobs.starting import start
from django_leasejobs.store import StartResult

from .common import RunModelAdmin, page_context
from .start_form import JobChoice, StartPage, form_payload, startable_job, summary_of

__all__ = ["RunStarts"]

#: The confirmation's buttons (A9), named as Django's admin names its own (``_save``):
#: a job's form may not have fields starting with ``_`` (``job_checks.form_problem``).
CONFIRM, BACK = "_confirm", "_back"
#: What a start cannot do, said on the page with nothing written.
REFUSALS = (NotQueueSafe, InvalidKey, DatabaseFull, StartContended, JobNotRegistered)


class RunStarts(RunModelAdmin):
    """The run admin's add view: start a run (A9)."""

    start_template = "admin/leasejobs/run/start.html"
    start_confirm_template = "admin/leasejobs/run/start_confirm.html"

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """``leasejobs.add_run``: the add view starts runs; it never edits one (A6)."""
        codename = get_permission_codename("add", self.opts)
        return bool(request.user.has_perm(f"{self.opts.app_label}.{codename}"))

    def add_view(
        self, request: HttpRequest, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """GET: the chooser, or a job's page (``?job=NAME``). POST: start the run (A9)."""
        if not self.has_add_permission(request):
            raise PermissionDenied
        if request.method not in ("GET", "HEAD", "POST"):
            return HttpResponse(status=405, headers={"Allow": "GET, HEAD, POST"})
        data = request.POST if request.method == "POST" else request.GET
        spec = startable_job(data.get("job"))
        if spec is None:
            chooser = JobChoice(data) if "job" in data else JobChoice()
            return self._render(request, self.start_template, chooser=chooser)
        if request.method != "POST":
            initial = request.GET.dict()
            page = StartPage(initial={**initial, "job": spec.name}, spec=spec)
            job_form = None if spec.form is None else spec.form(initial=initial)
            return self._render_page(request, spec, page, job_form)
        page = StartPage(request.POST, spec=spec)
        job_form = None if spec.form is None else spec.form(request.POST, request.FILES)
        valid = page.is_valid()
        payload = page.cleaned_data.get("payload") if job_form is None else None
        if job_form is not None and job_form.is_valid():
            payload = form_payload(job_form)
        if not valid or (job_form is not None and job_form.errors):
            return self._render_page(request, spec, page, job_form)
        if BACK in request.POST:  # from the confirmation: change the values
            return self._render_page(request, spec, page, job_form)
        values = page.cleaned_data
        if not spec.safe_to_repeat and CONFIRM not in request.POST:
            return self._render_confirm(request, spec, values, payload)
        try:
            with transaction.atomic(using=router.db_for_write(Run)):
                result = start(spec, payload, instance=values["instance"], again=values["again"])
                self._log(request, result, values["again"])
        except REFUSALS as refused:  # said on the page; the transaction wrote nothing
            page.add_error(None, str(refused))
            return self._render_page(request, spec, page, job_form)
        self.message_user(
            request, self._started(spec, values["instance"], result), self._level(result)
        )
        return self._to_run(request, result.run)

    # -- what a start records and says --------------------------------------------------

    def _log(self, request: HttpRequest, result: StartResult, again: bool) -> None:
        """Record who started the run (an addition), or who joined a live one (a change)."""
        if not result.joined:
            self.log_addition(request, result.run, "Started from the admin")
        elif again:
            self.log_change(request, result.run, "Joined from the admin, asking for one more run")
        else:
            self.log_change(request, result.run, "Joined from the admin")

    def _started(self, spec: Job, instance: str, result: StartResult) -> SafeString:
        """Say what the start did; a join links the live run (R1)."""
        link = self._run_link(result.run.pk)
        if not result.joined:
            return format_html(_("Run {} of {} started (instance {})."), link, spec.name, instance)
        joined = format_html(
            _(
                "A run of {} for instance {} was already live: joined it, run {}. "
                "It keeps its own payload."
            ),
            spec.name,
            instance,
            link,
        )
        if result.run.rerun_requested:
            return format_html(
                "{} {}", joined, _("One more run follows it, with the payload given here.")
            )
        return joined

    @staticmethod
    def _level(result: StartResult) -> int:
        return messages.INFO if result.joined else messages.SUCCESS

    def _run_link(self, pk: str) -> SafeString:
        return format_html('<a href="{}">{}</a>', self._change_page(pk), pk)

    def _change_page(self, pk: str) -> str:
        name = f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_change"
        return reverse(name, args=[pk])

    def _to_run(self, request: HttpRequest, run: Run) -> HttpResponseRedirect:
        if self.has_view_or_change_permission(request):
            return HttpResponseRedirect(self._change_page(run.pk))
        return HttpResponseRedirect(reverse(f"{self.admin_site.name}:index"))

    # -- pages ------------------------------------------------------------------------

    def _render(self, request: HttpRequest, template: str, **context: Any) -> TemplateResponse:
        return TemplateResponse(
            request,
            template,
            page_context(
                self,
                request,
                title=_("Start a run"),
                add_url=reverse(
                    f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_add"
                ),
                **context,
            ),
        )

    def _render_page(
        self, request: HttpRequest, spec: Job, page: StartPage, job_form: forms.Form | None
    ) -> TemplateResponse:
        return self._render(
            request,
            self.start_template,
            job_name=spec.name,  # not the Job: a template would call it
            not_safe=not spec.safe_to_repeat,
            page=page,
            job_form=job_form,
            summary=summary_of(spec),
            media=None if job_form is None else job_form.media,
            has_errors=page.errors or (job_form is not None and job_form.errors),
        )

    def _render_confirm(
        self, request: HttpRequest, spec: Job, values: dict[str, Any], payload: Any
    ) -> TemplateResponse:
        carried = [
            (name, value)
            for name, items in request.POST.lists()
            if name != "csrfmiddlewaretoken" and not name.startswith("_")
            for value in items
        ]
        return self._render(
            request,
            self.start_confirm_template,
            job_name=spec.name,
            instance=values["instance"],
            again=values["again"],
            payload=json.dumps(payload, indent=2, ensure_ascii=False),
            carried=carried,
            confirm=CONFIRM,
            back=BACK,
        )
