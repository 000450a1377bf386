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
from typing import TYPE_CHECKING

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
from .setbacks import ended, fail, superseded
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
    # R3 keeps the cursor of a pass that returned None; a handler that forgot to
    # return would then run again and again, changing nothing: count it (visible).
    idle = not done and cursor == run.cursor and not record.steps_recorded
    idle_passes = run.idle_passes + 1 if idle else 0
    written = store.Written(
        run,
        lease.owner,
        cursor,
        counters,
        done=done,
        progress_total=record.progress_total,
        drop_steps=record.steps_recorded or run.has_steps,
        result=stored,
        idle_passes=None if idle_passes == run.idle_passes else idle_passes,
    )
    # A finish that drops no step ledger is one statement, which can carry the BEGIN
    # of the next run claimed ahead (§13). Taken only now, so that a drive told to
    # stop while this pass ran begins nothing more.
    carried = (
        follower.claim_to_carry()
        if follower is not None and done and not written.drop_steps
        else None
    )
    try:
        committed: bool | None = None  # None: nothing carried, or nothing of it written
        if follower is not None and carried is not None:
            committed = _commit_and_begin(written, follower, carried)
        elif going_on is not None and not done and going_on.may():
            committed = _commit_and_go_on(written, lease, going_on)
        if committed is None:
            committed = store.commit(written)
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
    finished = run.as_written(
        status=RunStatus.DONE,
        attempts=0,
        failure_code="",
        last_error="",
        live_key=None,
        lease_owner=None,
        lease_began_at=None,
        cursor=cursor,
        counters=counters,
        **({} if stored is None else {"result": stored}),
    )
    ended(lease, finished, signals.run_completed)
    return Outcome(PassOutcome.COMPLETED)


def _commit_and_begin(written: store.Written, follower: Follower, carried: Claimed) -> bool | None:
    """R3's finish with the next pass's BEGIN carried in it (L4, §13); whether the finish won.

    ``None``: the database refused the pair, so nothing of it was written.
    """
    then = store.NextBegin(follower.run_id, carried.owner, carried.countdown.margin)
    began: bool | None = None
    committed: bool | None = None
    try:
        committed, began = store.commit_and_begin(written, then)
    except DatabaseError:
        if connection_lost(store.alias()):
            raise  # whether the next pass began is not known: its claim is left to its lease
        # Nothing of the pair was written. The next run begins alone in its turn, and
        # the finish is sent alone: if the database refuses it again, that is this pass's.
    follower.sent(began)
    return committed


def _commit_and_go_on(written: store.Written, lease: Lease, going_on: GoingOn) -> bool | None:
    """R3's advance with the run's next pass claimed and begun in it (L2, L4); whether it won.

    ``None``: nothing was written -- the lease is gone, or the queue was paused.
    """
    owner = new_owner()
    # Counted from before the statement is sent, as a claim's: the round trip counts (L1).
    countdown = Countdown(lease.countdown.lease, Countdown.now())
    claimed = store.commit_and_go_on(
        written, store.NextPass(owner, current_holder(), countdown.lease)
    )
    if claimed is None:
        # Nothing written: the lease is gone, or the queue was paused meanwhile (W6). The
        # advance alone tells which; the drive's next claim then finds the queue paused.
        return None
    going_on.claimed = Claimed(claimed, owner, countdown, begun=True)
    return True


def _idle_warning(run: Run, idle_passes: int) -> str:
    """Once, at the :data:`IDLE_PASSES_WARN`-th pass in a row that changed nothing: say so."""
    if idle_passes != IDLE_PASSES_WARN:
        return ""
    warning = IDLE_WARNING.format(passes=idle_passes)
    logger.warning("Run id=%s job=%s %s", run.pk, run.job, warning)
    return warning
