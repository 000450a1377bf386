"""The end of a pass: its verdict, then its handler's ending, as ONE store verb (R3-R10, L6).

A pass ends with a verdict (what decided it: its lease, its timeout, a step,
a shutdown -- :class:`~.passes.Verdict`) and an ending (what its handler
returned or raised). :func:`conclude` maps the two to exactly one of
``commit``, ``settle``, ``defer`` or ``hold`` -- or none, when the lease is
gone. A finish may carry the next run's BEGIN in its own statement
(``commit_and_begin``, :mod:`.follower`), and an advance the claim and
BEGIN of the same run's next pass (``commit_and_go_on``, :mod:`.going_on`);
either is still this pass's one verb.
The commit is :mod:`.returned`'s; the endings that write none of the
handler's work are :mod:`.setbacks`'. Each takes the pass's
:class:`~.leases.Lease` whole and returns its :class:`~.outcome.Outcome`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, NamedTuple

from . import store
from .errors import describe
from .exceptions import DecodeFailed, Defer
from .leases import Lease
from .outcome import Outcome
from .returned import commit_returned
from .setbacks import fail, fail_step, superseded
from .states import FailureCode, PassOutcome
from .verdicts import Verdict

if TYPE_CHECKING:
    from .follower import Follower
    from .going_on import GoingOn

__all__ = ["Ending", "conclude"]


class Ending(NamedTuple):
    """How the handler's call ended: what it returned, or what it raised."""

    result: object = None
    error: BaseException | None = None


def conclude(
    lease: Lease,
    ending: Ending,
    follower: Follower | None = None,
    going_on: GoingOn | None = None,
) -> Outcome:
    """What decided the pass, else how its handler ended, as one store verb (R3-R10, L6).

    A finish carries the BEGIN of *follower*, the drive's next run claimed
    ahead, where it can (:mod:`.follower`); an advance claims and begins the
    run's next pass where the drive may *go on* with it (:mod:`.going_on`).
    """
    verdict = lease.record.conclude()
    if verdict is Verdict.OPEN and ending.error is None:
        # Nothing decided the pass and its handler returned: the common case, first.
        return commit_returned(lease, ending.result, follower, going_on)
    if verdict is Verdict.LOST:
        return superseded(lease)
    if verdict is Verdict.INTERRUPTED:
        # Shutting down: hand the run back at this step boundary, uncharged.
        if not store.defer(lease.run, lease.owner, timedelta(0)):
            return superseded(lease)
        warning = "released at a step boundary: the worker is stopping"
        return Outcome(PassOutcome.DEFERRED, warning=warning)
    if verdict is Verdict.TIMED_OUT:
        error = f"PassTimedOut: the pass ran past {lease.spec.timeout}"
        return fail(lease, FailureCode.TIMEOUT, error)
    if verdict is Verdict.STEP_FAILED:
        assert lease.record.failed_step is not None
        return fail_step(lease, lease.record.failed_step)
    # Nothing decided the pass: its handler's ending does.
    if isinstance(ending.error, Defer):
        if not store.defer(lease.run, lease.owner, ending.error.delay):
            return superseded(lease)
        return Outcome(PassOutcome.DEFERRED)
    if isinstance(ending.error, DecodeFailed):
        return fail(lease, FailureCode.DECODE_FAILED, describe(ending.error))
    assert ending.error is not None  # else the handler returned, committed above
    return fail(lease, FailureCode.HANDLER_FAILED, describe(ending.error))
