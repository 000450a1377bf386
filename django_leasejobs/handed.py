"""What a pool thread does with the runs it was handed (SPEC W5, L2, L3, §13, F10).

The :class:`~.dispatcher.Dispatcher` hands a thread one run, or a *stretch*
of short runs of one job in a row; the thread claims them on its own
connection -- a stretch in one statement -- and drives them with the one
loop, :func:`~.in_turn.drive_in_turn`, over a :class:`Handed` line. What each
run came to goes back to the dispatcher, which counts it in its drive.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from django.db import DatabaseError, connections

from .claims_ahead import Claims
from .due import DriveOptions, DueKey
from .errors import connection_lost
from .follower import Follower
from .in_turn import NOT_WON, REFUSED, SKIPPED, Ran, drive_in_turn
from .leases import Claimed

if TYPE_CHECKING:
    from .registry import Job

__all__ = ["Handed", "Unclaimed", "run_alone", "run_handed", "run_stretch"]


class Unclaimed:
    """The ids of the runs handed to the pool whose thread has not claimed them yet.

    The dispatcher adds them and the threads take theirs out as they claim
    (and the dispatcher when it collects), so both hold the lock.
    """

    def __init__(self) -> None:
        self._ids: set[str] = set()
        self._lock = threading.Lock()

    def __contains__(self, run_id: object) -> bool:
        with self._lock:
            return run_id in self._ids

    def add(self, keys: list[DueKey]) -> None:
        with self._lock:
            self._ids.update(key.id for key in keys)

    def discard(self, keys: list[DueKey]) -> None:
        with self._lock:
            self._ids.difference_update(key.id for key in keys)


def run_handed(
    options: DriveOptions, keys: list[DueKey], spec: Job, handed: Unclaimed
) -> list[Ran]:
    """On a pool thread: claim the runs handed to it, and drive them (W5).

    One run alone is claimed by its pass (L2) or taken over (L3); a stretch
    is claimed in one statement first (:func:`run_stretch`).
    """
    if len(keys) == 1:
        return run_alone(options, keys[0], spec, handed)
    return run_stretch(options, keys, spec, handed)


def run_alone(options: DriveOptions, key: DueKey, spec: Job, handed: Unclaimed) -> list[Ran]:
    """On a pool thread: claim *key*'s run (L2) or take it over (L3), and drive it."""
    handed.discard([key])  # from here on a claim, or the other worker's, keeps it from a drive
    if options.stop():  # it waited for a thread while the drive was told to stop (W5)
        return [SKIPPED]
    if not _connected(options.using):
        return [REFUSED]
    return _driven(Handed([key], options.stop), options)


def _connected(using: str) -> bool:
    """Whether this thread has a connection, opening one if it has none; ``False`` if refused.

    Asked before the claim, so a refusal is known to have claimed nothing
    (F10): with the server at its connection limit the run stays due and the
    drive goes on with the threads that hold a connection, instead of
    reading the refusal as an outage and aborting the drive. Free while
    connected: Django opens nothing when it has a connection.
    """
    try:
        connections[using].ensure_connection()
    except DatabaseError:
        return False
    return True


class Handed:
    """A pool thread's :class:`~.in_turn.Line`: the run, or the stretch of runs, it was handed.

    A run handed alone is claimed by its pass (L2) or taken over (L3). A
    stretch is claimed in one statement first (:meth:`claim_ahead`); then a
    run whose claim went elsewhere is not driven, and once the drive is told
    to stop, or a BEGIN found its queue paused, no further pass begins and
    the rest are given back, uncharged (W5, W6).
    """

    def __init__(self, keys: list[DueKey], stop: Callable[[], bool]) -> None:
        self.keys = keys
        self.position = 0
        self.claims = Claims()
        self._stop = stop
        #: The runs whose claims this thread won; ``None`` for a run handed alone.
        self._won: set[str] | None = None
        self._paused: set[str] = set()

    def claim_ahead(self, spec: Job) -> None:
        self.claims.claim([key.id for key in self.keys], spec)
        self._won = self.claims.ids()

    def next(self) -> DueKey | None:
        return self.follow() if self.position < len(self.keys) else None

    def follow(self) -> DueKey:
        key = self.keys[self.position]
        self.position += 1
        return key

    def claim(self, key: DueKey, spec: Job) -> Claimed | Ran | None:
        if self._won is None:
            return None
        if key.id not in self._won:
            return NOT_WON
        if self._stop() or key.queue in self._paused:
            return SKIPPED  # no new pass once stopping, nor in a queue found paused
        claimed = self.claims.pop(key.id)
        return SKIPPED if claimed is None else claimed  # by the keeper, or its lease ran out

    def follower(self) -> Follower | None:
        after = self.keys[self.position].id if self.position < len(self.keys) else ""
        if after not in self.claims:
            return None
        return Follower(self.claims, after, lambda: not self._stop())

    def noted(self, key: DueKey, ran: Ran) -> None:
        if ran.outcomes and ran.outcomes[-1].paused:
            self._paused.add(key.queue)


def _driven(line: Handed, options: DriveOptions) -> list[Ran]:
    """What each of *line*'s runs came to, in order: those not reached after a lost
    connection were skipped, uncharged (D4)."""
    ran = [one for _key, one in drive_in_turn(line, options)]
    return ran + [SKIPPED] * (len(line.keys) - len(ran))


def run_stretch(
    options: DriveOptions, keys: list[DueKey], spec: Job, handed: Unclaimed
) -> list[Ran]:
    """On a pool thread: claim *keys*' runs in one statement, then drive them in turn (§13).

    As the drive's own thread drives its claims made ahead: each finish
    carries the next run's BEGIN (:mod:`.follower`), a claim whose turn
    comes too late to begin is given back, and the keeper gives back those
    behind a pass that runs long (:class:`Handed`).
    """
    using = options.using
    if not _connected(using):
        handed.discard(keys)
        return [REFUSED] * len(keys)
    line = Handed(keys, options.stop)
    try:
        line.claim_ahead(spec)
    except DatabaseError as exc:
        handed.discard(keys)
        return [Ran([], error=exc, lost=connection_lost(using)), *[NOT_WON] * (len(keys) - 1)]
    # Claimed now, or another worker's: a drive's snapshot no longer reads them as due,
    # and one given back from here on is due for any drive to hand over again.
    handed.discard(keys)
    try:
        return _driven(line, options)
    finally:
        line.claims.give_back()  # whatever was not reached: due again at once, uncharged (L2)
