"""The runs a drive claimed ahead of their turn, and the keeper that gives them back (§13, L2).

Several runs of a job whose passes are short are claimed in one statement
(:mod:`.store.ahead`; how many: :mod:`.pacing`). What a drive claimed ahead
and did not reach (stopped, or out of runs) it gives back, due again at once
and uncharged.

A pass can still run long after short ones -- the average cannot see it
coming. Then the runs claimed ahead of it would wait out that pass while
another worker sat idle. So while a pass runs with claims held behind it,
the :class:`Keeper` (a side thread of this process, with a database
connection of its own while it works) gives them back once the pass has run
:data:`GIVE_BACK_AFTER`, with a notification (W2), for any worker to take.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from django.db import DatabaseError, connections

from .errors import describe
from .holder import current_holder
from .leases import Claimed, Countdown
from .pacing import AHEAD_WAIT
from .store import alias
from .store.ahead import claim_ahead, give_back, owner_of
from .store.unanswered import note

if TYPE_CHECKING:
    from .registry import Job

__all__ = ["GIVE_BACK_AFTER", "Claims", "Keeper", "keeper"]

logger = logging.getLogger("django_leasejobs")

#: How long a pass may run with claims held behind it before they are given back.
GIVE_BACK_AFTER = AHEAD_WAIT * 2


class Claims:
    """The runs one drive claimed ahead and has not reached yet.

    The drive's thread takes them in turn; the :class:`Keeper` may give them
    all back meanwhile, from its own thread, so both hold the lock.
    """

    def __init__(self) -> None:
        self._held: dict[str, tuple[str, Claimed]] = {}
        self._lock = threading.Lock()
        #: Held while claims are being given back, until the release has committed.
        self._returning = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self._held)

    def __contains__(self, run_id: object) -> bool:
        with self._lock:
            return run_id in self._held

    def ids(self) -> set[str]:
        """The ids of the runs whose claims are held."""
        with self._lock:
            return set(self._held)

    def claim(self, run_ids: list[str], spec: Job) -> None:
        lease = spec.effective_lease
        sent = Countdown.now()  # the round trip counts against the claims (L1)
        prefix, won = claim_ahead(run_ids, lease, current_holder())
        with self._lock:
            for run_id, found in won.items():
                claimed = Claimed(found, owner_of(prefix, run_id), Countdown(lease, sent))
                self._held[run_id] = (prefix, claimed)

    def turn(self, run_id: str, batch: list[str], spec: Job) -> tuple[Claimed | None, bool]:
        """The claim made ahead for *run_id* (``None``: claim it alone), and whether it was lost.

        When none is held and *batch* (``run_id`` and the runs after it) has
        more than one run, claims them all ahead first; *lost* then says the
        claim of ``run_id`` went to another worker.
        """
        claimed = self.pop(run_id)
        if claimed is not None:
            return claimed, False
        # The keeper may be giving the claims behind a long pass back right now: claimed
        # again -- alone or with others -- before that release commits, they would read
        # as another worker's (lost).
        with self._returning:
            pass
        if len(batch) < 2:
            return None, False
        self.claim(batch, spec)
        claimed = self.pop(run_id)
        return claimed, claimed is None

    def pop(self, run_id: str) -> Claimed | None:
        """The claim made ahead for *run_id*, if it can still begin; else ``None``.

        A claim whose share of the lease ran out while earlier passes ran is
        given back first (uncharged), so that the run is claimed afresh,
        never counted as an admission miss (L5) it did not make.
        """
        held = self.withdraw(run_id)
        return None if held is None else held[1]

    def withdraw(self, run_id: str) -> tuple[str, Claimed] | None:
        """:meth:`pop`, with the claim's prefix, so that it can be :meth:`restore` d."""
        with self._lock:
            held = self._held.pop(run_id, None)
        if held is None:
            return None
        prefix, claimed = held
        if claimed.countdown.can_begin():
            return held
        give_back(prefix, [run_id])
        return None

    def restore(self, run_id: str, prefix: str, claimed: Claimed) -> None:
        """Hold *claimed* again: taken for a BEGIN that was never written (:mod:`.follower`)."""
        with self._lock:
            self._held[run_id] = (prefix, claimed)

    @contextmanager
    def watch(self) -> Iterator[None]:
        """Around a pass: give the claims held behind it back if it runs long (§13)."""
        # Inside a transaction (a test's), the claims are not another connection's to give back.
        if not self._held or connections[alias()].in_atomic_block:
            yield
            return
        keeper.watch(self)
        try:
            yield
        finally:
            keeper.unwatch(self)

    def give_back(self) -> int:
        """Release every claim not reached; never fails the drive. Returns how many."""
        by_prefix: dict[str, list[str]] = defaultdict(list)
        with self._returning:
            with self._lock:
                for run_id, (prefix, _claimed) in self._held.items():
                    by_prefix[prefix].append(run_id)
                self._held.clear()
            given = 0
            for prefix, run_ids in by_prefix.items():
                try:
                    given += give_back(prefix, run_ids)
                except DatabaseError as exc:
                    # Never begun, they cost nothing; given back once the database answers (F3).
                    logger.warning("Claims made ahead could not be given back: %s", describe(exc))
                    for run_id in run_ids:
                        note(run_id, owner_of(prefix, run_id))
        return given

    def set_aside(self) -> None:
        """A drive cut off from the database: give its claims back once it answers (F3)."""
        with self._returning, self._lock:
            for run_id, (prefix, _claimed) in self._held.items():
                note(run_id, owner_of(prefix, run_id))
            self._held.clear()


class Keeper:
    """A side thread that gives back the claims held behind a pass that runs long (§13).

    Started the first time a drive watches a pass, and then kept for the
    life of the process: a daemon thread asleep on a condition while no pass
    is watched. It opens a database connection only to give claims back,
    and closes it at once -- a rare event, and never one of the connections
    W5 counts for a pass.
    """

    def __init__(self) -> None:
        self._ready = threading.Condition()
        self._watched: dict[Claims, float] = {}
        self._thread: threading.Thread | None = None
        #: Whether the thread waits with no deadline, and so must be woken to watch.
        self._asleep = False

    def watch(self, claims: Claims) -> None:
        with self._ready:
            self._watched[claims] = time.monotonic() + GIVE_BACK_AFTER.total_seconds()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._keep, name="leasejobs-claims-keeper", daemon=True
                )
                self._thread.start()
            # Woken only from its wait without a deadline: any other deadline it waits
            # for is earlier than this one (each is now + GIVE_BACK_AFTER), and it looks
            # again then. So a pass -- of one drive, or of every pool thread -- does not
            # wake it for nothing: at one short pass after another, it wakes about once
            # per GIVE_BACK_AFTER, not once per pass.
            if self._asleep:
                self._asleep = False
                self._ready.notify()

    def unwatch(self, claims: Claims) -> None:
        with self._ready:
            self._watched.pop(claims, None)

    def _keep(self) -> None:
        while True:
            with self._ready:
                while not self._watched:
                    self._asleep = True
                    self._ready.wait()
                self._asleep = False
                claims, deadline = min(self._watched.items(), key=lambda item: item[1])
                left = deadline - time.monotonic()
                if left > 0:
                    self._ready.wait(left)
                    continue
                del self._watched[claims]
            try:
                given = claims.give_back()
                if given:
                    logger.info("A pass ran long: %s runs claimed behind it given back", given)
            finally:
                connections.close_all()  # this thread's connection only


#: This process's keeper, shared by its drives.
keeper = Keeper()
