"""The start of a pass: claim, then BEGIN -- with a limited job's slot -- or a miss (L2-L5, C2-C4).

:func:`claim` takes the run for one pass under a fresh owner token (L2);
:func:`admit` turns that claim into the pass's :class:`~.leases.Lease` once
BEGIN has written (L4) -- sent on its own, or carried in the commit of the
pass before it (:mod:`.follower`) -- the commitment point after which the
handler runs whatever happens. Before it, a claim may still end without the
handler: a takeover of a job not safe to repeat is held (L3), one that spent
the retry policy fails, a claim that cannot begin in time is a miss (L5),
and a limited job's pass that finds no slot or rate token is throttled (C2,
C3). After a carried BEGIN, one more: a lease found taken by another worker
before the handler starts (:func:`_still_held`).
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import TYPE_CHECKING

from . import saturation, signals, store
from .exceptions import UnreadableRow
from .holder import current_holder
from .ids import new_owner
from .leases import TAKEOVER_NOTE, Claimed, Countdown, Lease
from .limits import Limit
from .outcome import PAUSED, SUPERSEDED, Outcome, Throttled
from .pacing import pace
from .setbacks import fail, hold, send, settle, superseded
from .states import FailureCode, PassOutcome, RunStatus, Throttle
from .store.limits import THROTTLE_WAIT, THROTTLE_WAIT_MIN
from .tracing import taken_over, takeover_span
from .verdicts import PassRecord

if TYPE_CHECKING:
    from .models import Run
    from .registry import Job

__all__ = ["admit", "claim"]

logger = logging.getLogger("django_leasejobs")

#: C3: a pass its rate refused at most this long (or a quarter of the rate's interval)
#: before the next allowed begin waits for it and asks again, instead of being throttled.
RATE_CATCH = timedelta(milliseconds=50)
#: How long after the rate's next allowed begin that second ask is sent.
RATE_CATCH_SLACK = 0.001


def claim(run_id: str, spec: Job, *, took_over: bool) -> Claimed | None:
    """L2: claim *run_id* for one pass under a new owner token; ``None`` if the claim was lost."""
    owner = new_owner()
    # Counted from before the claim is sent: the round trip counts against us (L1).
    countdown = Countdown(spec.effective_lease, Countdown.now())
    holder = current_holder()
    try:
        run = store.claim_and_read(run_id, owner, countdown.lease, holder, takeover=took_over)
    except UnreadableRow as unreadable:
        return Claimed(unreadable, owner, countdown)
    return None if run is None else Claimed(run, owner, countdown)


def admit(claimed: Claimed, spec: Job, *, took_over: bool) -> Lease | Outcome:
    """BEGIN the claimed pass (L4): its :class:`Lease` if it began, else what the claim came to."""
    unreadable = claimed.found if isinstance(claimed.found, UnreadableRow) else None
    run: Run = unreadable.run if unreadable is not None else claimed.found  # type: ignore[assignment]
    if spec.per_run is not None and unreadable is None:
        spec = spec.per_run(run)  # a task's own retry policy, timeout and repeat rule (§9)
    lease = Lease(run, spec, claimed.owner, claimed.countdown, PassRecord(spec.timeout))
    judged = took_over or _takeover_unjudged(run)
    if judged and (not spec.safe_to_repeat or spec.retry.exhausted(run.attempts)):
        return _taken_over(lease)
    if claimed.begun is None:
        begun = _begin(lease)
        if isinstance(begun, Outcome):
            return begun
        lease = begun
    elif not claimed.begun:  # carried in the last commit, the BEGIN was refused (L4)
        return _not_begun(lease)
    elif not _still_held(lease):
        return superseded(lease)
    # BEGIN wrote: the pass is committed to running (L4), whatever happens next.
    if unreadable is not None:
        # Reading the row is part of the pass: a row the database cannot hand
        # back fails like one whose JSON does not parse (R9, §12).
        return fail(lease, FailureCode.DECODE_FAILED, f"UnreadableRow: {unreadable.reason}")
    lease.record.begin()
    return lease


def _takeover_unjudged(run: Run) -> bool:
    """Whether a takeover charged *run* and no pass has been judged since (F3, L3).

    A takeover claim charges the interrupted pass, writes ``lease_expired``
    and clears the begun lease; the pass that made it then holds the run,
    fails it, or runs it. When that claim's reply was lost and its worker
    died before giving it back, the run falls due as an unbegun claim, and
    the next claim -- a fresh one -- would run a handler L3 says must be
    held, or one whose retry policy is spent: the failure the takeover wrote
    says it was one. (A run that is retried after such a takeover also reads
    so; judged again, it passes the same way: safe to repeat, attempts left.)
    """
    return run.failure_code == FailureCode.LEASE_EXPIRED and run.status == RunStatus.RUNNING


def _taken_over(lease: Lease) -> Outcome:
    """L3: the claim charged the interrupted pass one attempt; its run is held, or it fails.

    No pass follows, so this is a span of its own (O2, O3): a trace backend
    shows why the run stopped.
    """
    run, spec = lease.run, lease.spec
    with takeover_span(lease) as span:
        if not spec.safe_to_repeat:
            outcome, code = hold(lease), FailureCode.INTERRUPTED
        else:
            code = FailureCode.LEASE_EXPIRED
            outcome = settle(lease, code, TAKEOVER_NOTE, run.attempts, None)
        taken_over(span, outcome.status, code, TAKEOVER_NOTE)
    return outcome


def _begin(lease: Lease) -> Lease | Outcome:
    """L4's BEGIN, with a limited job's slot and rate token (C2, C3); the lease, once it wrote."""
    spec, countdown = lease.spec, lease.countdown
    if not countdown.can_begin():
        return _admission_miss(lease)
    if spec.limit is None:
        if not store.begin(lease.run_id, lease.owner, countdown.margin):
            return _not_begun(lease)
        return lease
    key = lease.run.limit_key or ""
    admission = store.begin_limited(
        lease.run_id, lease.owner, countdown.margin, job=spec.name, key=key, limit=spec.limit
    )
    if (wait := _nearly_allowed(admission, spec.limit)) is not None and countdown.can_begin():
        time.sleep(wait)
        admission = store.begin_limited(
            lease.run_id, lease.owner, countdown.margin, job=spec.name, key=key, limit=spec.limit
        )
    if admission.throttle is not None:
        return _throttled(lease, admission)
    if not admission.begun:
        return _not_begun(lease)
    saturation.began(spec.name, key)
    # Its slot is as alive as its lease: no renewal may revive an expired one (C2).
    return lease.evolve(strict=spec.limit.concurrency is not None)


def _nearly_allowed(admission: store.Admission, limit: Limit) -> float | None:
    """C3: seconds to wait for the rate's next begin, when it is at most :data:`RATE_CATCH` away.

    A run falls due when its rate allows it; a begin a few milliseconds
    late pushes the next allowed one as much later, so the next run, due on
    time, finds the rate a few milliseconds short. Throttled, it would be
    driven again a drive later and its begin lost that much more; waiting
    the few milliseconds on its own thread, it begins on the rate's time
    and the backlog keeps its pace at any concurrency (§13).
    """
    if admission.throttle is not Throttle.RATE or admission.left is None or limit.rate is None:
        return None
    catch = min(RATE_CATCH, limit.rate.interval / 4)
    if admission.left > catch:
        return None
    return max(admission.left, timedelta(0)).total_seconds() + RATE_CATCH_SLACK


def _still_held(lease: Lease) -> bool:
    """A BEGIN carried in the last pass's commit: the lease, renewed if it ran low since (L7).

    Between that commit and this pass came the end of the pass before it --
    its signal receivers, a schedule's outcome. Where they took so long
    that no more than the margin of this lease is left, it is renewed
    before the handler starts, as a step would renew it; a renewal that
    finds it gone means another worker has the run, and the handler is not
    called (L6).
    """
    countdown = lease.countdown
    if countdown.can_begin():
        return True
    sent = countdown.now()
    if not store.renew(lease.run_id, lease.owner, countdown.lease):
        return False
    countdown.renewed(sent)
    return True


def _throttled(lease: Lease, admission: store.Admission) -> Outcome:
    """C2, C3: the job's limit refused the pass; it ran nothing and is charged nothing.

    Refused a slot, the run is due again after about one of the job's passes
    (the time a slot takes to free), between 50 ms and a second; refused by
    its rate, when the rate next allows a begin.
    """
    which = admission.throttle
    assert which is not None
    typical = pace.seconds(lease.spec.name)
    wait = THROTTLE_WAIT if typical is None else timedelta(seconds=typical)
    wait = min(THROTTLE_WAIT, max(THROTTLE_WAIT_MIN, wait))
    if not store.throttle(lease.run_id, lease.owner, which, admission.until, wait):
        return SUPERSEDED
    key = lease.run.limit_key or ""
    saturation.refused(lease.spec.name, key, which)
    limit = lease.spec.limit
    rate = limit.rate if limit is not None and which is Throttle.RATE else None
    every = None if rate is None else rate.interval
    throttled = Throttled(key, which, admission.until, wait, every)
    return Outcome(PassOutcome.THROTTLED, throttle=throttled)


def _not_begun(lease: Lease) -> Outcome:
    """BEGIN refused the claim: its queue was paused since the drive read it, or it is a miss.

    BEGIN refuses a run of a paused queue (W6) as it refuses a claim with too
    little lease left (L4). Only here, where it refused, is the queue read
    again: a pause lets the claim go uncharged -- nothing ran, and nothing
    was refused for want of time -- and anything else is an admission miss.
    """
    if store.is_paused(lease.run.queue) and store.let_go(lease.run_id, lease.owner):
        return PAUSED
    return _admission_miss(lease)


def _admission_miss(lease: Lease) -> Outcome:
    """L5: the claim could not begin in time; nothing ran, nothing is charged."""
    run, countdown = lease.run, lease.countdown
    waited = countdown.lease - countdown.left()

    def note(misses: int) -> str:
        return (
            f"job {lease.spec.name!r}: claim not begun in time (lease {countdown.lease}, "
            f"margin {countdown.margin}, claim to begin took {waited}); admission miss "
            f"{misses} of {store.ADMISSION.max_attempts}"
        )

    missed = store.miss(run.pk, lease.owner, note((run.admission_misses or 0) + 1))
    if missed is None:
        return SUPERSEDED
    warning = note(missed.misses)
    logger.warning("Admission miss id=%s %s", run.pk, warning)
    if not missed.failed:
        return Outcome(PassOutcome.SUPERSEDED, warning=warning)
    code = FailureCode.LEASE_TOO_SHORT
    failed = run.as_written(status=RunStatus.FAILED, failure_code=code, last_error=warning)
    send(signals.run_failed, failed, failure_code=code, error=warning)
    return Outcome(PassOutcome.FAILED, error=warning, warning=warning)
