"""The operators' overview (SPEC §16 O4, O5): the work as a whole, on one admin page.

For a chosen window (the last hour, day or week): passes per interval by
outcome and each job's p50 / p95 pass duration, read from the pass
statistics (O1, :mod:`django_leasejobs.figures`); each queue's due runs and
lag with its pause (O5, W6); held, stalled, throttled and overdue counts,
each a link to the list that shows them; and a per-job table with its last
failure.

The charts are SVG drawn here, on the server: no script, no chart library,
no network (O4). A bar is a ``<rect>`` whose geometry is computed below and
whose colour is a class of ``leasejobs/overview.css`` -- the admin's CSS
variables for text and lines, outcome colours set for each of its themes --
so it follows the admin's dark mode, and the ``viewBox`` scales it to a
phone. Each chart comes with a ``<table>`` of the same numbers, for screen
readers.

Every figure is a bounded read, so that the page stays within O4's 300 ms
over a million retained runs and 30 days of statistics
(``benchmarks/overview_page.py`` measures it): the day and week windows are
summed per interval by the database (:func:`~django_leasejobs.figures.coarse_window`).
A statistics row that cannot be read is counted and shown as such, and a
read the database refuses is reported on the page, never a 500.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.contrib import messages
from django.contrib.admin.utils import quote
from django.core.exceptions import PermissionDenied
from django.db import router, transaction
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.http import urlencode
from django.utils.translation import gettext_lazy as _

from django_leasejobs import figures
from django_leasejobs.clock import get_clock
from django_leasejobs.conf import conf
from django_leasejobs.errors import READ_ERRORS, unreadable_reason
from django_leasejobs.figures.failures import lookups_for
from django_leasejobs.models import Run
from django_leasejobs.registry import registry
from django_leasejobs.times import duration, moment, zone_name

from .charts import SPANS, Span, bounds, durations_chart, passes_chart, seconds_text
from .common import page_context

__all__ = ["SPANS", "Span", "bounds", "overview_page", "read_window"]

VIEW = "leasejobs.view_run"
CHANGE = "leasejobs.change_run"
#: The most jobs whose last failure one page reads (one bounded read each).
FAILURES_MAX = 20


def read_window(span: Span, since: datetime, until: datetime) -> figures.Window:
    """The window's statistics: per minute as stored, or summed per interval by the database."""
    if span.step == timedelta(minutes=1):
        return figures.window(since, until, span.step)
    return figures.coarse_window(since, until, span.step)


# -- the rest of the page -------------------------------------------------------------------------


def _list(model_admin: Any, model: str, **query: str) -> str:
    url = reverse(f"{model_admin.admin_site.name}:leasejobs_{model}_changelist")
    return f"{url}?{urlencode(query)}" if query else url


def attention_links(
    model_admin: Any, found: figures.Attention, now: datetime
) -> list[dict[str, Any]]:
    """Held, stalled, throttled and overdue: each with the list that shows them (or the nearest)."""
    shortest = min([figures.stalled_before(spec.name) for spec in registry] + [conf.STALL_AFTER])
    live_since = (now - shortest).isoformat()
    running = {"status__exact": "running"}
    return [
        {
            "key": "held",
            "label": _("Held runs"),
            "n": found.held,
            "url": _list(model_admin, "run", status__exact="held"),
        },
        {
            # A count of runs, not a status: no run is "stalled", a schedule is (S6).
            "key": "stalled",
            "label": _("Runs live past their stall time"),
            "n": found.stalled,
            "url": _list(model_admin, "run", **running, started_at__lt=live_since),
            "hint": _(
                "how many running runs have been live longer than their job's stall_after; "
                "the list shows every running run started before the shortest stall time"
            ),
        },
        {
            "key": "throttled",
            "label": _("Throttled runs"),
            "n": found.throttled,
            "url": _list(model_admin, "run", throttled="yes"),
        },
        {
            "key": "overdue",
            "label": _("Overdue schedules"),
            "n": found.overdue,
            "url": _list(model_admin, "schedule", enabled__exact="1"),
            "hint": _("the list shows the enabled schedules with their state"),
        },
    ]


def age_text(seconds: float | None) -> str:
    """How long the oldest due run has waited: "40 s", "12 min", "3 h 30 min", "2 d 1 h"."""
    return "—" if seconds is None else duration(seconds)


def queue_rows(model_admin: Any, found: list[figures.QueueFigures]) -> list[dict[str, Any]]:
    """Each queue with the list of its running runs and its pause or resume confirmation."""
    site = model_admin.admin_site.name
    pause = reverse(f"{site}:leasejobs_pausedqueue_pause")
    resume = reverse(f"{site}:leasejobs_pausedqueue_resume")
    return [
        {
            "figures": queue,
            "lag": age_text(queue.oldest_due_seconds),
            "runs": _list(model_admin, "run", status__exact="running", queue=queue.queue),
            "pause": f"{pause}?{urlencode({'queue': queue.queue})}",
            "resume": f"{resume}?{urlencode({'queue': queue.queue})}",
        }
        for queue in found
    ]


def job_rows(model_admin: Any, jobs: list[figures.JobFigures]) -> list[dict[str, Any]]:
    """The per-job table: figures of the window, and the last failure of each job that failed.

    A Django task is a row of its own, named by its path as its statistics are (§9).
    """
    failing = {
        job.job
        for job in sorted(jobs, key=lambda job: -job.failures)[:FAILURES_MAX]
        if job.failures
    }
    rows = []
    for job in jobs:
        # A name that is no job's here -- a task's path (§9) -- lists by the run list's search,
        # which finds a job's runs and a task's alike, each along its index.
        runs = {"job": job.job} if len(lookups_for(job.job)) == 1 else {"q": job.job}
        failure, reason = None, None
        if job.job in failing:
            try:
                failure = figures.last_failure(job.job)
            except READ_ERRORS as exc:
                reason = unreadable_reason(exc)
        rows.append(
            {
                "figures": job,
                "rate": "—" if job.failure_rate is None else f"{job.failure_rate:.1%}",
                "p50": seconds_text(job.p50),
                "p95": seconds_text(job.p95),
                "runs": _list(model_admin, "run", **runs),
                "failed": _list(model_admin, "run", **runs, status__exact="failed"),
                "failure": failure,
                "failure_url": None
                if failure is None
                else reverse(
                    f"{model_admin.admin_site.name}:leasejobs_run_change", args=[quote(failure.run)]
                ),
                "unreadable": reason,
            }
        )
    return rows


def _guarded(
    model_admin: Any, request: HttpRequest, read: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """What *read* returns, or nothing and a message saying why the database refused it."""
    try:
        # A savepoint: on PostgreSQL a refused read would otherwise end the request's transaction.
        with transaction.atomic(using=router.db_for_read(Run)):
            found = read()
    except READ_ERRORS as exc:
        model_admin.message_user(
            request,
            _("The figures cannot be read: %(reason)s") % {"reason": unreadable_reason(exc)},
            messages.ERROR,
        )
        return {}
    return found


def overview_page(model_admin: Any, request: HttpRequest) -> TemplateResponse:
    """The overview page, for users with ``leasejobs.view_run`` (403 otherwise).

    Its two halves are read apart, so that statistics the database refuses to
    sum still leave the queues (and their pause buttons) on the page.
    """
    if not request.user.has_perm(VIEW):
        raise PermissionDenied
    request.current_app = model_admin.admin_site.name
    span = SPANS.get(request.GET.get("window", ""), SPANS["hour"])
    now = get_clock().now(router.db_for_read(Run))
    since, until = bounds(now, span)

    def current() -> dict[str, Any]:
        found = figures.attention(now)
        return {
            "queues": queue_rows(model_admin, figures.every_queue(now)),
            "attention": attention_links(model_admin, found, now),
            "live": found.live,
        }

    def statistics() -> dict[str, Any]:
        win = read_window(span, since, until)
        jobs = sorted(win.jobs.values(), key=lambda job: (-job.passes, job.job))
        return {
            "passes": passes_chart(win, span),
            "durations": durations_chart(jobs),
            "jobs": job_rows(model_admin, jobs),
            "unreadable": win.unreadable,
        }

    return TemplateResponse(
        request,
        "admin/leasejobs/overview/overview.html",
        page_context(
            model_admin,
            request,
            title=_("Lease jobs overview"),
            span=span,
            spans=SPANS.values(),
            since=since,
            until=until,
            since_text=moment(since),
            now_text=moment(now),
            zone=zone_name(),
            may_change=request.user.has_perm(CHANGE),
            **_guarded(model_admin, request, current),
            **_guarded(model_admin, request, statistics),
        ),
    )
