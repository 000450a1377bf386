"""The run page's step ledger (A2, A8): each step of the pass in flight, or of the last failed
one -- whether it completed, or is in flight (begun and never recorded: it may have
half-happened), its result folded when long, and when it was recorded.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from django_leasejobs import store
from django_leasejobs.models import Step

from .common import ReadOnlyMixin, StepTabularInline
from .display import json_block
from .times import moment_tag

__all__ = ["StepInline"]


class StepInline(ReadOnlyMixin, StepTabularInline):
    """The step ledger of the pass in flight, or of the last failed one (A2)."""

    model = Step
    extra = 0
    can_delete = False
    fields = (
        "name",
        "completed_display",
        "result_display",
        "attempts",
        "last_error",
        "recorded_display",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        """The ledger where the run page read its run: the write alias (§12)."""
        return super().get_queryset(request).using(store.alias())

    @admin.display(description=_("completed"))
    def completed_display(self, step: Step) -> SafeString | str:
        """Yes, no -- or in flight: begun and never recorded, it may have half-happened (A8)."""
        if step.completed:
            return str(_("yes"))
        if step.in_flight:
            return format_html(
                '<strong class="leasejobs-step-in-flight">{}</strong> {} {}',
                _("in flight"),
                _("since"),
                moment_tag(step.began_at),
            )
        return str(_("no"))

    @admin.display(description=_("recorded at"))
    def recorded_display(self, step: Step) -> str:
        return moment_tag(step.recorded_at)

    @admin.display(description=_("result"))
    def result_display(self, step: Step) -> str:
        return json_block(step.decoded_result(), empty=_("not completed"))
