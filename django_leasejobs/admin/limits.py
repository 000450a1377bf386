"""What the run pages show of flow control (SPEC C5): the limits of a run's job.

Which limit a throttled run waits for, and until when, is said by its "next
due" (:mod:`.next_due`).
"""

from __future__ import annotations

from django.utils.translation import gettext as _

from django_leasejobs.models import Run
from django_leasejobs.registry import registry
from django_leasejobs.times import duration

__all__ = ["limit_text"]


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
        parts.append(_("%(n)s per %(per)s") % {"n": limit.rate.n, "per": duration(limit.rate.per)})
    shown = ", ".join(parts)
    if limit.key is not None:
        return _("%(limit)s, per key (this run: %(key)s)") % {
            "limit": shown,
            "key": run.limit_key or "—",
        }
    return shown
