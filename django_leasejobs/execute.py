"""One run, walked along the data path: claim -> begin -> pass -> commit or settle.

The drive (:mod:`.driver`) calls :func:`drive_run` for each run it picked,
on its own thread or on a pool thread (W5). Each pass is three steps, each
in its own module: :mod:`.admission` claims the run and BEGINs the pass,
which makes its :class:`~.leases.Lease`; the handler runs on that lease;
:mod:`.conclusion` maps how it ended to one store verb. Every write goes
through :mod:`.store`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import TYPE_CHECKING

from . import store
from .admission import admit, claim
from .conclusion import Ending, conclude
from .exceptions import UnreadableRow
from .going_on import GoingOn
from .heartbeat import Heartbeat
from .hung import bounded
from .known import known_as
from .leases import Claimed, Lease
from .outcome import Outcome
from .passes import Pass
from .pooled import put_back
from .states import PassOutcome
from .tracing import finished, pass_span

if TYPE_CHECKING:
    from .due import DriveOptions, Turn
    from .follower import Follower

__all__ = ["drive_run", "run_pass"]


def drive_run(turn: Turn, options: DriveOptions) -> list[Outcome]:
    """Run up to ``options.max_passes`` passes of *turn*'s run; return each one's outcome (D3).

    An empty list means the claim was lost: another drive has the run. Each
    pass claims afresh under a new owner token and reads back what the last
    one committed -- but the first, when the turn came *claimed* already; on
    a backend whose ``UPDATE`` returns rows, an advance claims and begins the
    next pass of an unlimited job in its own commit (:mod:`.going_on`).
    The pass that finishes the run carries the BEGIN of the turn's
    *follower*, the drive's next run, in its commit where it can
    (:mod:`.follower`).
    """
    run_id, spec, claimed = turn.key.id, turn.spec, turn.claimed
    took_over, stop, passes = turn.key.took_over, options.stop, options.max_passes
    # A limited job's BEGIN takes a slot or a rate token: its passes go the long way (C2, C3).
    goes_on = passes > 1 and spec.limit is None and store.goes_on(options.using)
    outcomes: list[Outcome] = []
    gone_on: Claimed | None = None  # this pass, claimed and begun in the last one's advance
    for number in range(passes):
        if number and gone_on is None and stop():
            break
        first = number == 0
        if gone_on is not None:
            claimed = gone_on
        elif not first or claimed is None:
            claimed = claim(run_id, spec, took_over=took_over and first)
            if claimed is None:
                break
        started = time.monotonic()
        admitted = admit(claimed, spec, took_over=took_over and first)
        going_on = GoingOn(more=number + 1 < passes, stop=stop) if goes_on else None
        outcome = (
            admitted
            if isinstance(admitted, Outcome)
            else run_pass(admitted, options.interrupt, turn.follower, going_on)
        )
        gone_on = None if going_on is None else going_on.claimed
        found = claimed.found
        if isinstance(found, UnreadableRow):
            run, instance = found.run, None  # its instance could not be read back
        else:
            run, instance = found, found.instance
        job = known_as(run.job, instance)  # from the claimed row: no read, no decode (§9, §13)
        seconds = time.monotonic() - started
        outcomes.append(replace(outcome, seconds=seconds, queue=run.queue, job=job))
        if outcome.status != PassOutcome.ADVANCED:
            break
    return outcomes


def run_pass(
    lease: Lease,
    interrupt: Callable[[], bool] | None = None,
    follower: Follower | None = None,
    going_on: GoingOn | None = None,
) -> Outcome:
    """Call the handler on its begun *lease*, then conclude the pass (R3-R10, L6, L10)."""
    # L10: a handler with no step boundaries keeps its lease from a side thread.
    beating: AbstractContextManager[object] = (
        Heartbeat(lease) if lease.spec.heartbeat else nullcontext()
    )
    # §13: on Django's pool, a pass waiting on a slow upstream holds no connection.
    put_back()
    with pass_span(lease) as span:  # O3, when OpenTelemetry is there
        try:
            p = Pass(lease, interrupt=interrupt)
            timeout = lease.spec.timeout
            # F13: on a pool thread, a handler hung past its timeout costs that thread only.
            with bounded(None if timeout is None else timeout.total_seconds()), beating:
                ending = Ending(result=lease.spec.handler(p))
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # LeaseLost and PassInterrupted too; SystemExit fails it
            ending = Ending(error=exc)
        outcome = conclude(lease, ending, follower, going_on)
        finished(span, outcome.status, ending.error)
    return outcome
