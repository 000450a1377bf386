"""A pass whose handler returned: its commit, in one store verb (SPEC R3, L6, §13).

What the handler returned is checked storable first (a cursor, counters or
a result that JSON would not return unchanged fails the pass instead). The
commit is then one of three: a plain :func:`~.store.commit`; a finish that
carries the BEGIN of the drive's next run claimed ahead
(``commit_and_begin``, :mod:`.follower`); or an advance that claims and
begins the same run's next pass (``commit_and_go_on``, :mod:`.going_on`).
Either of the two carried forms falls back to the plain commit when its
extra half cannot be written.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError

from . import signals, store
from .codec import encode
from .errors import connection_lost, describe
from .exceptions import NotQueueSafe
from .holder import current_holder
from .ids import new_owner
from .leases import Claimed, Countdown, Lease
from .models import Run
from .outcome import Outcome
from .passes import IDLE_PASSES_WARN, IDLE_WARNING, PassResult
from .schedules.writes import record_outcome
from .setbacks import fail, send, superseded
from .states import FailureCode, PassOutcome, RunStatus

if TYPE_CHECKING:
    from .follower import Follower
    from .going_on import GoingOn

__all__ = ["commit_returned"]

logger = logging.getLogger("django_leasejobs")


def commit_returned(
    lease: Lease, result: object, follower: Follower | None, going_on: GoingOn | None
) -> Outcome:
    """R3: commit what the handler returned, once it is known to be storable."""
    run, record = lease.run, lease.record
    if result is not None and not isinstance(result, PassResult):
        problem = TypeError(
            f"the handler returned {type(result).__name__}; return p.advance(cursor), "
            "p.done() or None"
        )
        return fail(lease, FailureCode.HANDLER_FAILED, describe(problem))
    try:
        cursor = run.cursor
        if result is not None and result.has_cursor:
            cursor = encode(result.cursor, "cursor")
        counters = encode(record.counters, "counters")
        returned = None if result is None else result.result
        stored = None if returned is None else encode(returned, "result")
    except NotQueueSafe as exc:
        return fail(lease, FailureCode.HANDLER_FAILED, describe(exc))
    done = result is not None and result.done
    written: dict[str, Any] = {"cursor": cursor, "counters": counters}
    if stored is not None:
        written["result"] = stored
    # R3 keeps the cursor of a pass that returned None; a handler that forgot to
    # return would then run again and again, changing nothing: count it (visible).
    idle = not done and cursor == run.cursor and not record.steps_recorded
    idle_passes = run.idle_passes + 1 if idle else 0
    changed = None if idle_passes == run.idle_passes else idle_passes
    drop_steps = record.steps_recorded or run.has_steps
    # A finish that drops no step ledger is one statement, which can carry the BEGIN
    # of the next run claimed ahead (§13). Taken only now, so that a drive told to
    # stop while this pass ran begins nothing more.
    carried = (
        follower.claim_to_carry() if follower is not None and done and not drop_steps else None
    )
    try:
        if follower is not None and carried is not None:
            committed = _commit_and_begin(lease, follower, carried, changed, written)
        elif going_on is not None and not done and going_on.may():
            committed = _commit_and_go_on(lease, going_on, changed, written, drop_steps)
        else:
            committed = _commit_alone(lease, done, drop_steps, changed, written)
    except DatabaseError as exc:
        if connection_lost(store.alias()):
            raise
        # The database refused a value the checks let through: the pass
        # failed, with the database's reason, rather than leaving it begun.
        error = describe(exc, prefix="the pass's outcome could not be stored: ")
        return fail(lease, FailureCode.HANDLER_FAILED, error)
    if not committed:
        return superseded(lease)
    if not done:
        return Outcome(PassOutcome.ADVANCED, warning=_idle_warning(run, idle_passes))
    if lease.spec.schedule:
        record_outcome(run, RunStatus.DONE)
    finished = run.as_written(
        status=RunStatus.DONE,
        attempts=0,
        failure_code="",
        last_error="",
        live_key=None,
        lease_owner=None,
        lease_began_at=None,
        **written,
    )
    send(signals.run_completed, finished)
    return Outcome(PassOutcome.COMPLETED)


def _commit_and_begin(
    lease: Lease,
    follower: Follower,
    carried: Claimed,
    idle_passes: int | None,
    written: dict[str, Any],
) -> bool:
    """R3's finish with the next pass's BEGIN carried in it (L4, §13); whether the finish won."""
    then = store.NextBegin(follower.run_id, carried.owner, carried.countdown.margin)
    progress_total = lease.record.progress_total
    try:
        committed, began = store.commit_and_begin(
            lease.run,
            lease.owner,
            then,
            progress_total=progress_total,
            idle_passes=idle_passes,
            **written,
        )
    except DatabaseError:
        if connection_lost(store.alias()):
            raise  # whether the next pass began is not known: its claim is left to its lease
        # Nothing of the pair was written. The next run begins alone in its turn, and
        # the finish is sent alone: if the database refuses it again, that is this pass's.
        follower.sent(None)
        return _commit_alone(lease, True, False, idle_passes, written)
    follower.sent(began)
    return committed


def _commit_and_go_on(
    lease: Lease,
    going_on: GoingOn,
    idle_passes: int | None,
    written: dict[str, Any],
    drop_steps: bool,
) -> bool:
    """R3's advance with the run's next pass claimed and begun in it (L2, L4); whether it won."""
    owner = new_owner()
    # Counted from before the statement is sent, as a claim's: the round trip counts (L1).
    countdown = Countdown(lease.countdown.lease, Countdown.now())
    then = store.NextPass(owner, current_holder(), countdown.lease)
    progress_total = lease.record.progress_total
    claimed = store.commit_and_go_on(
        lease.run,
        lease.owner,
        then,
        progress_total=progress_total,
        drop_steps=drop_steps,
        idle_passes=idle_passes,
        **written,
    )
    if claimed is not None:
        going_on.claimed = Claimed(claimed, owner, countdown, begun=True)
        return True
    # Nothing written: the lease is gone, or the queue was paused meanwhile (W6). The
    # advance alone tells which; the drive's next claim then finds the queue paused.
    return _commit_alone(lease, False, drop_steps, idle_passes, written)


def _commit_alone(
    lease: Lease, done: bool, drop_steps: bool, idle_passes: int | None, written: dict[str, Any]
) -> bool:
    """R3's commit with nothing carried in it; whether it won."""
    return store.commit(
        lease.run,
        lease.owner,
        done=done,
        progress_total=lease.record.progress_total,
        drop_steps=drop_steps,
        idle_passes=idle_passes,
        **written,
    )


def _idle_warning(run: Run, idle_passes: int) -> str:
    """Once, at the :data:`IDLE_PASSES_WARN`-th pass in a row that changed nothing: say so."""
    if idle_passes != IDLE_PASSES_WARN:
        return ""
    warning = IDLE_WARNING.format(passes=idle_passes)
    logger.warning("Run id=%s job=%s %s", run.pk, run.job, warning)
    return warning
