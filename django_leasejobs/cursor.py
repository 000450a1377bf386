"""A drive's cursor along its snapshot (D1-D4, C4, W5).

A drive reads its snapshot of due runs (D1) and goes along it in order. The
:class:`DueCursor` is how far along it is: the runs claimed ahead of their
turn, the keys found at their limit (C4), the queues found paused (W6), the
runs handed to pool threads and not back yet. What the runs came to is the
drive's :class:`~.bookkeeper.Bookkeeper`. Two values: the cursor reads the
books (a drive stops at its limit of runs attempted, or when it was
aborted), the books never read the cursor.

With ``concurrency=1`` the drive's own thread drives the runs along the
cursor (:func:`drive_on_this_thread`); with more, a
:class:`~.dispatcher.Dispatcher` hands them to pool threads. Either way each
run is driven by the one loop, :func:`~.in_turn.drive_in_turn`.
"""

from __future__ import annotations

import random
from collections.abc import Container
from typing import TYPE_CHECKING

from django.db import DatabaseError

from . import store
from .bookkeeper import Bookkeeper
from .claims_ahead import Claims
from .contained import contained
from .due import DriveOptions, DueKey
from .follower import Follower
from .full_keys import FullKeys
from .holder import current_holder
from .in_turn import NOT_WON, Ran, drive_in_turn
from .leases import Claimed
from .pacing import STRETCH_MAX, pace
from .stats import lost_observers

if TYPE_CHECKING:
    from .registry import Job

__all__ = ["DueCursor", "drive_on_this_thread"]


class DueCursor:
    """One drive's way along its snapshot (D1), whoever drives the runs.

    At ``concurrency=1`` it is also the :class:`~.in_turn.Line` the drive's
    thread drives.
    """

    def __init__(
        self, keys: list[DueKey], options: DriveOptions, *, limit: int, books: Bookkeeper
    ) -> None:
        self.keys = keys
        self.options = options
        self.limit = limit
        self.books = books
        self.report = books.report
        self.position = 0
        self.claims = Claims()  # runs claimed ahead of their turn, while passes are short (§13)
        self.full_keys = FullKeys()  # keys found at their limit, and their runs held back (C4)
        #: Queues a BEGIN found paused since the snapshot was read: their runs are stepped
        #: over from then on, as the snapshot steps over those paused before it (W6).
        self.paused: set[str] = set()
        #: Runs handed to a pool thread and not yet counted (W5): they count against the limit.
        self.in_flight = 0

    def next(self) -> DueKey | None:
        """The next run to claim, or ``None`` when stopping, or the snapshot or limit is spent."""
        if self.options.stop():
            return None
        while (
            self.position < len(self.keys)
            and self.report.attempted + self.in_flight < self.limit
            and not self.report.aborted
        ):
            key = self.keys[self.position]
            self.position += 1
            if key.queue in self.paused:
                continue  # W6: paused since the snapshot; a claim made ahead is given back
            spec = self.options.jobs[key.job]
            if spec.limit is not None and self.full_keys.throttles(key):
                continue  # C4: not claimed only to be throttled; held back at the end
            return key
        return None

    def claim(self, key: DueKey, spec: Job) -> Claimed | Ran | None:
        """*key*'s claim -- with the runs after it claimed ahead when passes are short (§13).

        ``None``: the pass claims it itself; :data:`~.in_turn.NOT_WON`: another
        worker has it.
        """
        left = self.limit - self.report.attempted - self.in_flight
        most = min(pace.batch(spec), len(self.keys), left)
        claimed, lost = self.claims.turn(
            key.id, _fresh(self.keys, self.position - 1, spec, most), spec
        )
        if not lost:
            return claimed
        if not self.claims:  # the batch won nothing: another worker is on this stretch
            self.lost(key)
        return NOT_WON

    def hand_out(self, free: int, busy: Container[str]) -> list[DueKey] | None:
        """The next run for a pool thread, and the runs after it that thread claims with it (W5).

        Idle threads share what is left rather than one of them driving it
        all in turn (*free* of them). A run in *busy* -- handed to a thread
        by an earlier drive, unclaimed yet, so still due in this snapshot --
        is not handed over twice. ``None`` when :meth:`next` has no more.
        """
        while (key := self.next()) is not None:
            if key.id in busy:
                continue
            most = -(-(self.left() + 1) // free) if free else len(self.keys)
            return self.stretch(key, self.options.jobs[key.job], most, busy)
        return None

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

    def follower(self) -> Follower | None:
        """The next run of the snapshot, if claimed ahead: its BEGIN may ride in a finish (§13)."""
        after = self.keys[self.position] if self.position < len(self.keys) else None
        if after is None or after.id not in self.claims:
            return None
        return Follower(self.claims, after.id, self.may_begin)

    def follow(self) -> DueKey:
        """The next run of the snapshot, whose pass began in the last commit (:mod:`.follower`)."""
        key = self.keys[self.position]
        self.position += 1
        return key

    def may_begin(self) -> bool:
        """Whether the drive may begin another pass: not stopping, nor at its limit with it (D2)."""
        # The pass in flight is not counted yet: with it, one more must stay within the limit.
        return (
            not self.options.stop()
            and not self.report.aborted
            and self.report.attempted + self.in_flight + 1 < self.limit
        )

    def left(self) -> int:
        """How many runs of the snapshot are still ahead of the cursor."""
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

    def noted(self, key: DueKey, ran: Ran) -> None:
        """A claim let go because its queue was paused meanwhile: its queue is stepped over (W6)."""
        if ran.outcomes and ran.outcomes[-1].paused:
            self.paused.add(ran.outcomes[-1].queue)

    def count(self, key: DueKey, ran: Ran) -> None:
        """Count what *key*'s run came to, wherever it was driven.

        A claim let go because its queue was paused meanwhile is no pass at
        all: not counted (:meth:`noted` steps over its queue from now).
        """
        if ran.error is not None:
            if isinstance(ran.error, DatabaseError):
                self.books.failed(key, ran.error, ran.lost)
            else:
                self.books.broke(key, ran.error)
            return
        if ran.skipped or not ran.won or ran.refused:
            return
        if not ran.outcomes:
            self.lost(key)
        outcomes = ran.outcomes
        if outcomes and outcomes[-1].paused:
            outcomes = outcomes[:-1]
        self.books.count(key, outcomes, ran.seconds)
        for outcome in outcomes:
            if outcome.throttle is not None:
                self.full_keys.reached(key.job, outcome.throttle)

    def counted(self, keys: list[DueKey], ran: list[Ran]) -> bool:
        """Count what a pool thread's runs came to; whether one lost its connection (F10)."""
        if not any(one.won for one in ran):
            self.lost(keys[0])  # another worker is on this stretch of the due order
        for key, one in zip(keys, ran, strict=True):
            self.count(key, one)
        return any(one.lost for one in ran)

    def end(self) -> None:
        """The drive's end: claims not reached given back, limited runs held back (C4).

        A drive whose connection was lost sets its claims aside instead: given
        back uncharged once the database answers again (F3).
        """
        if self.report.aborted:
            self.claims.set_aside()
        else:
            self.claims.give_back()
            self.report.throttled += self.full_keys.throttle_rest(self.report)


def drive_on_this_thread(cursor: DueCursor) -> None:
    """Drive the snapshot's runs one after another, on this thread (``concurrency=1``)."""
    for key, ran in drive_in_turn(cursor, cursor.options):
        cursor.count(key, ran)
    cursor.end()


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
