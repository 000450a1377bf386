"""When a run is next due, and why (A7, C5): the run list's "next due" column.

"Running" alone says nothing an operator can act on: a run retrying after
three failures, one that starts in an hour (``run_after``), one waiting for
its rate limit and one a worker holds right now all read the same. The
reason is worked out from the row's own columns, which the list has already
read, so the column costs no statement per row:

* its lease, as :meth:`Run.lease_state() <django_leasejobs.models.Run.lease_state>` judges it on
  the database's clock (L1): a pass in flight, a claim not yet begun, a
  lease that ran out (due for takeover), or -- ``throttled_by`` -- the limit
  its last claim found reached (C2, C3), which it reads as even while a
  drive's new claim asks that limit again: never as "claimed";
* ``attempts``: consecutive failed passes, so the due time is a back-off (R4);
* ``admission_misses``: claims that could not begin in time (L5);
* ``updated_at == started_at``: nothing has touched the run since its start,
  so a due time ahead is its ``run_after``; otherwise a ``Defer`` (R8);
* the queue paused (W6), read once per page.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from django_leasejobs.models import PausedQueue, Run
from django_leasejobs.states import DueReason, LeaseState, RunStatus, Throttle
from django_leasejobs.times import duration

from .display import holder_text, unreadable
from .held import in_flight_line
from .times import db_now, time_tag, until_tag

__all__ = ["DueReason", "NextDue", "next_due", "next_due_html", "queue_paused"]


@dataclass(frozen=True)
class NextDue:
    """Why *run* is due when it is, and when (the due time, or the lease's expiry)."""

    reason: DueReason
    at: datetime | None = None


def next_due(run: Run, now: datetime, *, paused: bool = False) -> NextDue:
    """When *run* is next due and why, read from its columns alone, at *now* (the database's).

    *paused* says whether the run's queue is paused (W6). The checks go in
    the order the drive decides: a live lease first (its holder moves the
    due time), then a paused queue, a throttle (which a due time in the
    past does not lift: the next claim is throttled again until a slot
    frees), then the due time and what set it. A throttled run a drive has
    claimed again has no time of its own to give: its due time is that
    claim's expiry, not its limit's.
    """
    at = run.next_attempt_at
    if run.status == RunStatus.HELD:
        return NextDue(DueReason.HELD)
    if run.status == RunStatus.CANCELLED and at is not None:
        return NextDue(DueReason.STOPPING, at)  # only a run cancelled mid-pass keeps one
    if run.status != RunStatus.RUNNING:
        return NextDue(DueReason.NONE)
    if at is None:
        return NextDue(DueReason.NEVER_DUE)
    lease = run.lease_state(now)
    if lease in _LEASED:
        return NextDue(_LEASED[lease], at)
    if paused:
        return NextDue(DueReason.QUEUE_PAUSED, at)
    if lease == LeaseState.THROTTLED:
        reason = DueReason.RATE if run.throttled_by == Throttle.RATE else DueReason.CONCURRENCY
        return NextDue(reason, None if run.lease_owner else at)
    if at <= now:
        return NextDue(DueReason.DUE_NOW, at)
    if run.attempts:
        return NextDue(DueReason.RETRY, at)
    if run.admission_misses:
        return NextDue(DueReason.ADMISSION, at)
    if run.updated_at == run.started_at:
        return NextDue(DueReason.RUN_AFTER, at)
    return NextDue(DueReason.DEFERRED, at)


#: The reasons of a lease that holds the run, whatever its queue (its holder moves its due time).
_LEASED = {
    LeaseState.LEASED: DueReason.LEASED,
    LeaseState.CLAIMED: DueReason.CLAIMED,
    LeaseState.EXPIRED: DueReason.LEASE_EXPIRED,
}


#: Where a run carries whether its queue is paused: read once for a page of runs.
PAUSED = "_leasejobs_queue_paused"


def queue_paused(run: Run) -> bool:
    """Whether *run*'s queue is paused: as the page read it, else read now (one run's page),
    where the run was read (§12: a run page reads the write alias)."""
    cache = vars(run)
    if PAUSED not in cache:
        paused = PausedQueue.objects.db_manager(run._state.db)
        cache[PAUSED] = paused.filter(queue=run.queue).exists()
    return bool(cache[PAUSED])


def mark_paused(runs: list[Run]) -> None:
    """Say on each of *runs* whether its queue is paused, in one read for the page."""
    paused = set(PausedQueue.objects.values_list("queue", flat=True))
    for run in runs:
        if unreadable(run) is None:
            vars(run)[PAUSED] = run.queue in paused


def _failed_passes(run: Run) -> str:
    return ngettext("after %(n)d failed pass", "after %(n)d failed passes", run.attempts) % {
        "n": run.attempts
    }


def next_due_html(run: Run, now: datetime | None = None) -> SafeString | str:
    """The "next due" cell of *run*: the reason in words, its time relative to now.

    *now* is the database's (L1): the page's, read once (:func:`~.times.db_now`).
    """
    if unreadable(run) is not None:
        return "—"
    now = now or db_now(run)
    due = next_due(run, now, paused=run.status == RunStatus.RUNNING and queue_paused(run))
    when = time_tag(due.at, now)  # "in 2m"
    until = until_tag(due.at, now)  # "02:14:05 (in 2m)"
    reason = due.reason
    if reason == DueReason.DUE_NOW:
        late = now - due.at if due.at else None
        if late is None or late.total_seconds() < 60:
            text = format_html("{}", _("due now"))
        else:
            text = format_html(_("due now, for {}"), duration(late))
    elif reason == DueReason.RETRY:
        text = format_html(_("retry {} ({}: {})"), when, _failed_passes(run), run.failure_code)
    elif reason == DueReason.ADMISSION:
        text = format_html(
            _("claim again {} ({} claims did not begin)"), when, run.admission_misses
        )
    elif reason == DueReason.RUN_AFTER:
        text = format_html(_("first pass {} (run after)"), when)
    elif reason == DueReason.DEFERRED:
        text = format_html(_("deferred, due {}"), when)
    elif reason == DueReason.RATE and due.at is None:
        text = format_html("{}", _("waiting for its rate limit"))
    elif reason == DueReason.RATE:
        # C5's words: which limit, and until when.
        text = format_html(_("waiting for its rate limit, until {}"), until)
    elif reason == DueReason.CONCURRENCY:
        text = format_html("{}", _("waiting for a free slot of its concurrency limit"))
    elif reason == DueReason.LEASED:
        text = format_html(_("running now on {}, lease until {}"), holder_text(run), until)
    elif reason == DueReason.CLAIMED:
        text = format_html(_("claimed by {}, not begun; lease until {}"), holder_text(run), until)
    elif reason == DueReason.LEASE_EXPIRED:
        text = format_html(_("due now: the lease of {} expired {}"), holder_text(run), when)
    elif reason == DueReason.QUEUE_PAUSED:
        text = format_html(_("queue {} is paused: nothing begins until it is resumed"), run.queue)
    elif reason == DueReason.HELD:
        text = format_html("{}", _("waiting for an operator (release: resume or fail)"))
        if line := in_flight_line(run):  # A8: what its pass stopped in
            text = format_html('{}<span class="leasejobs-in-flight">{}</span>', text, line)
    elif reason == DueReason.STOPPING:
        text = format_html(_("cancelled; its pass may run until {}"), until)
    elif reason == DueReason.NEVER_DUE:
        text = format_html("{}", _("never due: no drive will reach it (cancel it)"))
    elif run.attempts and run.status == RunStatus.FAILED:
        text = format_html(
            "{}",
            ngettext(
                "not due: %(n)d failed pass in a row",
                "not due: %(n)d failed passes in a row",
                run.attempts,
            )
            % {"n": run.attempts},
        )
    else:
        return "—"
    return format_html('<span class="leasejobs-due leasejobs-due-{}">{}</span>', reason, text)
