"""What the run pages show of flow control (SPEC C5): which limit a run waits for, and its job's."""

from __future__ import annotations

from django.contrib.admin.utils import display_for_value
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

from django_leasejobs.models import Run
from django_leasejobs.registry import registry
from django_leasejobs.states import RunStatus, Throttle

__all__ = ["limit_text", "waiting_for"]


def waiting_for(run: Run) -> SafeString | None:
    """ "Waiting for its concurrency limit" (or rate, until when) for a throttled run, else None.

    A run is waiting while its last claim was throttled and no worker holds it now.
    """
    if run.status != RunStatus.RUNNING or not run.throttled_by or run.lease_owner:
        return None
    if run.throttled_by == Throttle.RATE:
        text = _("waiting for its rate limit, until %(when)s") % {
            "when": display_for_value(run.next_attempt_at, "—")
        }
    else:
        text = _("waiting for a free slot of its concurrency limit")
    return format_html('<span class="leasejobs-throttled" style="color:#92400e">{}</span>', text)


def limit_text(run: Run) -> str:
    """The run's job's limit as registered in this process, and the key the run counts under."""
    spec = registry.get(run.job) if run.job in registry else None
    if spec is None or spec.limit is None:
        return "—" if not run.limit_key else _("key %(key)s") % {"key": run.limit_key}
    limit = spec.limit
    parts = []
    if limit.concurrency is not None:
        parts.append(_("%(n)s at once") % {"n": limit.concurrency})
    if limit.rate is not None:
        parts.append(_("%(n)s per %(per)s") % {"n": limit.rate.n, "per": limit.rate.per})
    shown = ", ".join(parts)
    if limit.key is not None:
        return _("%(limit)s, per key (this run: %(key)s)") % {
            "limit": shown,
            "key": run.limit_key or "—",
        }
    return shown
