"""The start page's forms (A9): the job chooser, the page's own fields, and the job's form's
values held to R2.

The page's own fields are ``job``, ``instance``, ``payload`` (a job without a
form) and ``again``; a job's form's fields keep their own names beside them
(``job_checks.form_problem`` refuses a form that would clash). Every value is
checked here, before anything is written: the JSON payload strictly (no
``NaN``, nothing past the codec's limits), and each of a form's cleaned
values where it sits, so that a date, a ``Decimal`` or a model instance is
refused on its own field -- a form converts such values itself.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from django_leasejobs.codec import check_queue_safe, decode, encode
from django_leasejobs.exceptions import InvalidKey, NotQueueSafe
from django_leasejobs.models.runs import INSTANCE_LENGTH
from django_leasejobs.registry import Job, registry
from django_leasejobs.store import check_key
from django_leasejobs.tasks.options import TASK_JOB

__all__ = ["JobChoice", "StartPage", "form_payload", "startable", "startable_job", "summary_of"]


def startable() -> list[Job]:
    """The registered jobs an operator may start here, by name: all but the task job (§9)."""
    return sorted((spec for spec in registry if spec.name != TASK_JOB), key=lambda s: s.name)


def startable_job(name: object) -> Job | None:
    """The startable job named *name*, or ``None``."""
    if not isinstance(name, str) or name == TASK_JOB or name not in registry:
        return None
    return registry.get(name)


class JobChoice(forms.Form):
    """The job chooser: which registered job to start."""

    job = forms.ChoiceField(
        label=gettext_lazy("Job"),
        help_text=gettext_lazy("The registered job to start a run of."),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        choices = [(spec.name, spec.name) for spec in startable()]
        self.fields["job"].choices = [("", "---------"), *choices]  # type: ignore[attr-defined]


class StartPage(JobChoice):
    """The page's own fields (A9), beside the job's form's; ``payload`` only without a form."""

    instance = forms.CharField(
        label=gettext_lazy("Instance"),
        initial="default",
        required=False,  # empty (or not sent) is start()'s own default
        max_length=INSTANCE_LENGTH,
        help_text=gettext_lazy(
            "What the run works on (empty: default). A job has at most one live run per "
            "instance: if one is live, it is joined rather than a second one started."
        ),
    )
    payload = forms.CharField(
        label=gettext_lazy("Payload (JSON)"),
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 6, "class": "vLargeTextField leasejobs-json"}),
        help_text=gettext_lazy(
            'The run\'s input, as JSON: e.g. {"source": "crm", "limit": 100}. Empty for none.'
        ),
    )
    again = forms.BooleanField(
        label=gettext_lazy("Again"),
        required=False,
        help_text=gettext_lazy(
            "If a run of this job and instance is live, run once more after it, with this payload."
        ),
    )

    def __init__(self, *args: Any, spec: Job, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if spec.form is not None:
            del self.fields["payload"]  # the job's form gives the payload

    def clean_instance(self) -> str:
        instance: str = self.cleaned_data["instance"] or "default"
        try:
            check_key("instance", instance, INSTANCE_LENGTH)
        except InvalidKey as refused:
            raise ValidationError(str(refused), code="invalid") from None
        return instance

    def clean_payload(self) -> Any:
        """The JSON text as a value held to R2 (strict: no ``NaN``, nothing past the limits)."""
        text = self.cleaned_data["payload"]
        if not text.strip():
            return None
        decoded = decode(text)
        if not decoded.ok:
            raise ValidationError(
                _("This is not JSON (%(error)s).") % {"error": decoded.error}, code="invalid"
            )
        try:
            encode(decoded.value, "payload")
        except NotQueueSafe as refused:
            raise ValidationError(str(refused), code="not_queue_safe") from None
        return decoded.value


def form_payload(form: forms.Form) -> dict[str, Any] | None:
    """The job form's ``cleaned_data`` as a payload, or ``None`` with each refusal on its field.

    Each value is checked where it sits, so the error names the field
    (R2: a date, a ``Decimal``, a model instance is refused, not converted).
    """
    payload = dict(form.cleaned_data)
    for name, value in payload.items():
        try:
            check_queue_safe(value, name)
        except NotQueueSafe as refused:
            # A plain message: the refusal's own params would be read as %-format arguments.
            form.add_error(name if name in form.fields else None, ValidationError(str(refused)))
    if form.errors:
        return None
    try:
        encode(payload, "payload")  # the size of the whole (VALUE_MAX_BYTES)
    except NotQueueSafe as refused:
        form.add_error(None, ValidationError(str(refused)))
        return None
    return payload


def summary_of(spec: Job) -> str:
    """The first line of the job's handler's docstring, to say what the job does."""
    doc = (getattr(spec.handler, "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else ""
