"""A drive's walk along its snapshot: each run claimed in turn, and driven (SPEC D1-D4, C4, W5).

With ``concurrency=1`` the drive's own thread drives one run after another,
as a drive always has (:func:`walk`). With more, a :class:`Dispatcher` walks
the same snapshot in the same order and claims each run, but hands its
passes to a :class:`~.pool.Pool` of threads and goes on while they run: up
to N passes at once, each on its own connection and under its own owner
token, every rule of the pass unchanged (W5). A slow pass holds one thread,
never the runs behind it while another thread is free (:mod:`.dispatcher`).

Either way the drive's state is a :class:`Walk`: the snapshot and how far
along it the drive is, the claims made ahead, the keys found at their
limit, the limit of runs, and the report.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Container
from typing import TYPE_CHECKING, NamedTuple

from django.db import DatabaseError

from . import store
from .contained import contained
from .errors import connection_lost, describe, one_line
from .execute import drive_run
from .follower import Follower
from .holder import current_holder
from .leases import Claimed
from .limited import Limited
from .outcome import Outcome
from .pacing import STRETCH_MAX, Claims, pace
from .report import DriveReport, Note
from .states import PassOutcome
from .stats import aggregate, lost_observers

if TYPE_CHECKING:
    from .registry import Job

__all__ = ["DueKey", "Walk", "drive", "walk"]

logger = logging.getLogger("django_leasejobs")


class DueKey(NamedTuple):
    id: str
    job: str
    took_over: bool
    #: The run's ``limit_key`` ("" for none): which limits it counts against (§14).
    limit_key: str = ""
    #: The run's queue: a queue found paused during the drive is stepped over (W6).
    queue: str = ""


class Walk:
    """One drive's way along its snapshot (D1), whoever drives the runs."""

    def __init__(
        self,
        keys: list[DueKey],
        by_name: dict[str, Job],
        *,
        using: str,
        limit: int,
        max_passes: int,
        stop: Callable[[], bool],
        interrupt: Callable[[], bool] | None,
        report: DriveReport,
    ) -> None:
        self.keys = keys
        self.by_name = by_name
        self.using = using
        self.limit = limit
        self.max_passes = max_passes
        self.stop = stop
        self.interrupt = interrupt
        self.report = report
        self.position = 0
        self.claims = Claims()  # runs claimed ahead of their turn, while passes are short (§13)
        self.limited = Limited()  # keys found at their limit, and their runs held back (C4)
        #: Queues a BEGIN found paused since the snapshot was read: their runs are stepped
        #: over from then on, as the snapshot steps over those paused before it (W6).
        self.paused: set[str] = set()
        #: Runs handed to a pool thread and not yet tallied (W5): they count against the limit.
        self.in_flight = 0

    def next(self) -> DueKey | None:
        """The next run to claim, or ``None`` when the snapshot or the limit is spent (D2, C4)."""
        while (
            self.position < len(self.keys)
            and self.report.attempted + self.in_flight < self.limit
            and not self.report.aborted
        ):
            key = self.keys[self.position]
            self.position += 1
            if key.queue in self.paused:
                continue  # W6: paused since the snapshot; a claim made ahead is given back
            spec = self.by_name[key.job]
            if spec.limit is not None and self.limited.holds_back(key):
                continue  # C4: not claimed only to be throttled; held back at the end
            return key
        return None

    def take(self, key: DueKey, spec: Job, room: int) -> tuple[Claimed | None, bool]:
        """Claim *key*'s run -- with up to *room* runs after it when passes are short (§13).

        Returns the claim (``None``: the pass claims it itself) and whether
        it was lost to another worker.
        """
        left = self.limit - self.report.attempted - self.in_flight
        most = min(pace.batch(spec), room, left)
        return self.claims.turn(key.id, _fresh(self.keys, self.position - 1, spec, most), spec)

    def stretch(self, key: DueKey, spec: Job, most: int, busy: Container[str] = ()) -> list[DueKey]:
        """*key*, and up to *most* - 1 runs after it for one thread to claim at once (W5, §13).

        Only *key* unless *spec*'s passes are short: then as many as wait no
        longer than :data:`~.pacing.AHEAD_WAIT` behind each other on one
        thread, within *most* and the drive's limit, all fresh runs of *spec*
        in a row (a takeover is claimed alone, L3). They are taken off the
        snapshot, and so are the runs in *busy* among them (already handed
        to a thread, not claimed yet).
        """
        left = self.limit - self.report.attempted - self.in_flight
        most = min(pace.batch(spec, most=STRETCH_MAX), most, left)
        if most < 2 or key.took_over:
            return [key]
        taken = [key]
        while len(taken) < most and self.position < len(self.keys):
            after = self.keys[self.position]
            if after.job != spec.name or after.took_over:
                break
            if after.id not in busy:
                taken.append(after)
            self.position += 1
        return taken

    def follower(self, *, may: Callable[[], bool]) -> Follower | None:
        """The next run of the snapshot, if claimed ahead: its BEGIN may ride in a finish (§13).

        *may* says, when the finish is sent, whether the drive may begin
        another pass (:meth:`may_begin` for a walk).
        """
        after = self.keys[self.position] if self.position < len(self.keys) else None
        if after is None or after.id not in self.claims:
            return None
        return Follower(self.claims, after.id, may)

    def follow(self) -> DueKey:
        """The next run of the snapshot, whose pass began in the last commit (:mod:`.follower`)."""
        key = self.keys[self.position]
        self.position += 1
        return key

    def may_begin(self) -> bool:
        """Whether a walk may begin another pass: not stopping, nor at its limit with it (D2)."""
        # The pass in flight is not tallied yet: with it, one more must stay within the limit.
        return (
            not self.stop()
            and not self.report.aborted
            and self.report.attempted + self.in_flight + 1 < self.limit
        )

    def left(self) -> int:
        """How many runs of the snapshot are still ahead of the walk."""
        return len(self.keys) - self.position

    def lost(self, key: DueKey) -> None:
        """*key*'s claim was lost: go on further along the snapshot (:func:`_away`).

        Most often another worker has the run. Counted for ``rundueJobs
        --metrics-port`` only when it does (O2): a claim this process's own
        drive made stale -- a run its other threads throttled, deferred or
        claimed since the snapshot was read -- is no contention. Telling the
        two apart costs a read, so it is made only while something counts.
        """
        self.position = _away(self.position, len(self.keys))
        if not lost_observers:
            return
        with contained("Claim metrics"):  # F12: never the drive's failure
            if store.claimed_elsewhere(key.id, current_holder()):
                for observer in lost_observers:
                    with contained("Claim metrics"):
                        observer()

    def failed(self, key: DueKey, exc: BaseException, lost: bool) -> None:
        """A database error on *key*'s run: that run only, or the drive if it is an outage."""
        self.report.errors.append(Note(key.id, describe(exc)))
        if lost:
            # The pass in flight is abandoned (its lease will expire) and
            # the rest of the drive waits for the next.
            self.report.aborted = one_line(exc)
            logger.error("Drive aborted: database error on run id=%s (%s)", key.id, type(exc))

    def tally(self, key: DueKey, outcomes: list[Outcome], seconds: float | None) -> None:
        """Count one run's passes; a throttled one ran nothing, so it is not ``attempted`` (C4).

        A claim let go because its queue was paused meanwhile is no pass at all:
        not counted, and the queue's other runs are stepped over from now (W6).
        """
        if outcomes and outcomes[-1].paused:
            self.paused.add(outcomes[-1].queue)
            outcomes = outcomes[:-1]
        if outcomes and outcomes[0].status != PassOutcome.THROTTLED and seconds is not None:
            pace.observe(key.job, seconds)
        self.report.attempted += any(
            outcome.status != PassOutcome.THROTTLED for outcome in outcomes
        )
        for outcome in outcomes:
            self.report.tally(key.id, outcome)
            # Known by its task's path for a task run (§9): the name its pass named.
            known = outcome.job or key.job
            aggregate.observe(known, outcome.queue, outcome.status, outcome.seconds)
            if outcome.throttle is not None:
                self.limited.reached(key.job, outcome.throttle)

    def finish(self) -> None:
        """The drive's end: claims not reached given back, limited runs held back (C4).

        A drive whose connection was lost sets its claims aside instead: given
        back uncharged once the database answers again (F3).
        """
        if self.report.aborted:
            self.claims.set_aside()
        else:
            self.claims.give_back()
            self.report.throttled += self.limited.hold_back(self.report)


def walk(state: Walk) -> None:
    """Drive the snapshot's runs one after another, on this thread (``concurrency=1``)."""
    carried: Claimed | None = None  # the next run's claim, its BEGIN sent with the last commit
    while True:
        key: DueKey | None
        if carried is not None and not state.report.aborted:
            key = state.follow()  # its pass began: in flight, driven even when stopping (W5)
        else:
            key = None if state.stop() else state.next()
        if key is None:
            break
        spec = state.by_name[key.job]
        follower: Follower | None = None
        claimed: Claimed | None
        try:
            if carried is not None:
                claimed, lost, carried = carried, False, None
            else:
                claimed, lost = state.take(key, spec, room=len(state.keys))
            if lost:
                if not state.claims:  # the batch won nothing: another worker is on this stretch
                    state.lost(key)
                continue
            follower = state.follower(may=state.may_begin)
            started = time.monotonic()
            with state.claims.watch():
                outcomes = drive(state, key, spec, claimed, follower)
            seconds = time.monotonic() - started
        except DatabaseError as exc:
            state.failed(key, exc, connection_lost(state.using))
            continue  # D4: this run only -- a deadlock or a refused row is not an outage
        except Exception as exc:  # nothing one run does stops the drive (R9)
            logger.exception("Run id=%s could not be driven", key.id)
            state.report.errors.append(Note(key.id, describe(exc)))
            continue
        finally:
            carried = None if follower is None else follower.claimed
        if not outcomes:
            state.lost(key)
        state.tally(key, outcomes, seconds)
    state.finish()


def drive(
    state: Walk, key: DueKey, spec: Job, claimed: Claimed | None, follower: Follower | None = None
) -> list[Outcome]:
    """Drive *key*'s run for up to its drive's passes (D3), from *claimed* if it is claimed.

    Its finish carries the BEGIN of *follower*, the next run, where it can (§13).
    """
    return drive_run(
        key.id,
        spec,
        took_over=key.took_over,
        max_passes=state.max_passes,
        stop=state.stop,
        interrupt=state.interrupt,
        claimed=claimed,
        follower=follower,
    )


def _fresh(keys: list[DueKey], start: int, spec: Job, most: int) -> list[str]:
    """Up to *most* ids of *spec*'s runs from *start* on, in a row, none a takeover (L3).

    What a drive may claim ahead in one statement: a takeover is claimed alone.
    """
    ids = []
    for key in keys[start : start + most]:
        if key.job != spec.name or key.took_over:
            break
        ids.append(key.id)
    return ids


def _away(position: int, length: int) -> int:
    """Where to go on in the snapshot after a lost claim at ``position - 1``.

    A lost claim means another worker is driving this stretch of the same
    due order, one run ahead. Going on with the next run would lose it again,
    and every other claim after it, in lockstep: half of all claims lost with
    two workers. Jumping to a random point further on lets the two drift
    apart; the runs stepped over are the ones the other worker is taking
    (and the next snapshot reads any it left).
    """
    rest = length - position
    return position + random.randrange(rest // 2) if rest > 1 else position
