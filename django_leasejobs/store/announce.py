"""At most one notifying commit in flight per process and database (SPEC W2, §13).

PostgreSQL serialises the commits of transactions that sent a ``NOTIFY``: a
commit takes one cluster-wide lock, held through its flush of the log, so
notifying commits go one at a time and lose group commit. Thirty-two threads
each calling ``start()`` in autocommit would queue for that lock, every
one of them.

Only an idle worker needs the notification, and one is enough: a woken
worker's drive reads every run committed before it. So in autocommit a
start carries the notification in its own ``INSERT`` -- as a lone writer
always does, at no cost beyond today's -- only while no other start of this
process is carrying one on the same database. A start that finds one in
flight writes without it and leaves one *owed*; whoever ends with a
notification owed and none in flight sends it on its own, after its own
commit and after the owed start's (``SELECT pg_notify()``, a transaction
that writes nothing and so flushes nothing). Every run committed is
followed by a notification sent after its commit: no idle worker misses it.

A start inside the caller's own transaction carries its notification as
before: delivered at that transaction's commit, never for a rollback.
"""

from __future__ import annotations

import logging
import threading
from typing import NamedTuple

from django.db import DatabaseError, connections

from django_leasejobs.errors import describe

from .base import notify

__all__ = ["Notice", "announcer"]

logger = logging.getLogger("django_leasejobs")


class Notice(NamedTuple):
    """How one start announces itself (:meth:`Announcer.notice`)."""

    #: Its statement carries ``pg_notify()``.
    carries: bool
    #: Counted here (autocommit): :meth:`Announcer.done` must be told how it ended.
    counted: bool


class Announcer:
    """Which databases have a notifying start in flight, and which are owed one.

    Shared by every thread of the process that starts runs, so both sets are
    read and written under one lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sending: set[str] = set()
        self._owed: set[str] = set()

    def notice(self, using: str) -> Notice:
        """Whether a start about to write on *using* carries the notification itself."""
        connection = connections[using]
        if connection.in_atomic_block or not connection.get_autocommit():
            return Notice(carries=True, counted=False)  # the caller's transaction decides
        with self._lock:
            if using in self._sending:
                return Notice(carries=False, counted=True)
            self._sending.add(using)
        return Notice(carries=True, counted=True)

    def done(self, using: str, notice: Notice, *, wrote: bool) -> None:
        """The start's statement ended (committed, or failed): settle what it owes.

        Never raises: a notification that cannot be sent is owed to the next
        start, and idle workers poll meanwhile (W2's ``--interval``).
        """
        if not notice.counted:
            return
        with self._lock:
            if notice.carries:
                self._sending.discard(using)
            elif wrote:
                self._owed.add(using)
            if using not in self._owed or using in self._sending:
                return
            self._owed.discard(using)
            self._sending.add(using)
        self._send(using)

    def _send(self, using: str) -> None:
        """Send what is owed on *using*, and what falls owed meanwhile, then stand down."""
        try:
            while True:
                notify(using)  # its own transaction: after every owed start's commit
                with self._lock:
                    if using not in self._owed:
                        self._sending.discard(using)
                        return
                    self._owed.discard(using)
        except DatabaseError as exc:
            logger.warning("Workers not notified of new runs yet (%s)", describe(exc))
            with self._lock:
                self._sending.discard(using)
                self._owed.add(using)

    def forget(self) -> None:
        """Nothing in flight, nothing owed (tests)."""
        with self._lock:
            self._sending.clear()
            self._owed.clear()


#: This process's notifications (W2), shared by its threads.
announcer = Announcer()
