"""A pool of threads that run passes, each on a database connection of its own (SPEC W5, §13).

Django's connections are per thread, so a pass on a pool thread writes on
that thread's connection -- its BEGIN, its steps, its commit -- and the
connection is kept from one pass to the next while the thread has work, as
a ``--loop`` worker keeps its own (§13). After the worker rested -- never
between the back-to-back drives of a backlog -- each thread lets go of a
connection past ``CONN_MAX_AGE`` or broken (``close_old_connections``)
before its next pass; when the pool closes, every thread closes its
connections and ends. A connection the database ended while a call ran
(``pg_terminate_backend``, ``KILL``) is closed when the call ends, so the
thread's next pass opens a new one (F4) instead of failing on the old.

Idle threads give their connections back (F10). A thread that has waited
:data:`IDLE_CLOSE` for a call closes its connection unless the site asked
for persistent ones (a ``CONN_MAX_AGE`` other than 0, which it then
respects); and while the worker finds connections refused
(:meth:`Pool.scarce`) every idle thread closes its own at once, persistent
or not. So a worker whose passes ran dry holds no connection for them, and
a server at ``max_connections`` gets back what this worker is not using.

A pass that hangs costs its thread, not the pool (F13). A pass declares how
long it may run (:func:`~.hung.bounded`: its job's ``timeout``, plus
:data:`~.hung.HUNG_GRACE`); one whose thread is still in it past that is
*abandoned*: its call is handed back as :class:`Abandoned`, and a new
thread takes its place, so *size* threads stay able to run passes -- up to
*size* abandoned threads at once, after which a hung pass simply holds its
thread. An abandoned thread that returns after all drops what its call
returned (the pass was past its timeout: R10, it committed nothing) and
ends. Threads are daemons: a hung one never keeps the process from exiting.

The pool runs whatever callable it is given and hands back what it
returned or raised, in the order the calls end; it knows nothing of runs.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, NamedTuple

from django.db import close_old_connections, connections

from .errors import drop_lost_connections
from .hung import Slot, on_this_thread
from .pooled import put_back

__all__ = ["IDLE_CLOSE", "Abandoned", "Done", "Pool", "Unstarted"]

logger = logging.getLogger("django_leasejobs")

#: How long an idle thread waits for a call before it gives back its connection (F10).
IDLE_CLOSE = 1.0


class Abandoned(Exception):
    """A call whose thread was given up: still running past its bound, or at the worker's exit."""


class Unstarted(Exception):
    """A call that waited for a thread and never got one: the pool gave up its calls (F13)."""


class Done(NamedTuple):
    """One call that ended: the *tag* it was given with, and what it returned or raised."""

    tag: Any
    value: Any = None
    error: BaseException | None = None


class _Call(NamedTuple):
    tag: Any
    call: Any
    generation: int


def _persistent() -> bool:
    """Whether any database has persistent connections (a ``CONN_MAX_AGE`` other than 0)."""
    return any(
        connections.settings[alias].get("CONN_MAX_AGE", 0) != 0 for alias in connections.settings
    )


class Pool:
    """*size* threads, started as they are first needed and kept until :meth:`close`.

    Up to *backlog* more calls may wait for a thread, so that one that frees
    starts its next call at once rather than after a round trip of the
    caller's.
    """

    def __init__(self, size: int, *, backlog: int = 0, name: str = "leasejobs-pass") -> None:
        if size < 1:
            raise ValueError("a pool has at least one thread")
        self.size = size
        self.backlog = backlog
        self._name = name
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[Done] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._slots: dict[threading.Thread, Slot] = {}
        #: Threads given up (F13) that have not ended yet.
        self._abandoned: list[threading.Thread] = []
        self._started = 0
        self._busy = 0
        #: Bumped when the worker rests: a thread then lets go of stale connections first.
        self._generation = 0
        #: Set while connections are refused: idle threads close theirs at once (F10).
        self._scarce = threading.Event()
        #: Set when a call ends, cleared when the ended calls are collected: a worker
        #: resting while passes are in flight wakes for their outcomes (W1, W5).
        self.ended = threading.Event()

    @property
    def busy(self) -> int:
        """Calls submitted and not yet collected with :meth:`wait`."""
        return self._busy

    @property
    def abandoned(self) -> int:
        """Threads given up on a hung pass (F13) that still run it."""
        self._abandoned = [thread for thread in self._abandoned if thread.is_alive()]
        return len(self._abandoned)

    def free(self) -> int:
        """How many more calls would start at once: the idle threads."""
        return max(0, self.size - self._busy)

    def room(self) -> int:
        """How many more calls may be submitted: idle threads, then the backlog's places."""
        return self.size + self.backlog - self._busy

    def rested(self) -> None:
        """The worker rested: each thread checks its connection before its next call."""
        self._generation += 1

    def scarce(self, scarce: bool = True) -> None:
        """Connections are refused (or, with ``False``, no longer): idle threads close theirs."""
        if scarce:
            self._scarce.set()
        else:
            self._scarce.clear()

    def submit(self, tag: Any, call: Any) -> None:
        """Run *call* on a free thread; its :class:`Done` comes back from :meth:`wait`."""
        if self._busy >= self.size + self.backlog:
            raise RuntimeError("every thread of the pool is busy, and its backlog full")
        self._busy += 1
        self._staff(self._busy)
        self._calls.put(_Call(tag, call, self._generation))

    def wait(self, timeout: float | None = None) -> list[Done]:
        """The calls that ended: at least one, waiting up to *timeout* (``None``: for ever).

        Returns an empty list when *timeout* passed first, or when nothing is busy.
        A call whose pass hangs past its bound comes back as :class:`Abandoned` (F13).
        """
        if not self._busy:
            return []
        self.ended.clear()  # set again by any call that ends from here on
        self._give_up_hung()
        try:
            ended = [self._done.get(timeout=timeout)]
        except queue.Empty:
            if not self._give_up_hung():
                return []
            ended = [self._done.get()]
        while True:
            try:
                ended.append(self._done.get_nowait())
            except queue.Empty:
                break
        self._busy -= len(ended)
        return ended

    def give_up(self) -> None:
        """Hand back every call now: those running as :class:`Abandoned`, those waiting as
        :class:`Unstarted` (the worker exits past its ``--stop-timeout``, F13)."""
        for thread in list(self._threads):
            self._abandon(thread, force=True)
        while True:
            try:
                waiting = self._calls.get_nowait()
            except queue.Empty:
                break
            if waiting is not None:
                self._done.put(Done(waiting.tag, error=Unstarted()))

    def close(self, timeout: float | None = None) -> None:
        """Let each thread finish its call, close its connections and end.

        With a *timeout*, threads still running after it are left (daemons: they
        keep no process alive).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        for _thread in self._threads:
            self._calls.put(None)
        for thread in self._threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                logger.warning("Pass thread %s did not end; left behind", thread.name)
        self._threads.clear()

    def _staff(self, busy: int) -> None:
        """Start threads until there is one per call, up to *size* (replacing abandoned ones)."""
        while len(self._threads) < min(self.size, busy):
            self._started += 1
            slot = Slot()
            thread = threading.Thread(
                target=self._serve, args=(slot,), name=f"{self._name}-{self._started}", daemon=True
            )
            self._threads.append(thread)
            self._slots[thread] = slot
            thread.start()

    def _give_up_hung(self) -> bool:
        """Abandon the threads whose pass is past its bound, up to *size* of them; any?"""
        now = time.monotonic()
        given_up = False
        for thread in list(self._threads):
            slot = self._slots[thread]
            if slot.deadline is None or now < slot.deadline:
                continue
            if self.abandoned >= self.size:
                break  # F13: at most N abandoned threads; a hung pass now holds its thread
            given_up |= self._abandon(thread, force=False)
        if given_up:
            self._staff(self._busy)
        return given_up

    def _abandon(self, thread: threading.Thread, *, force: bool) -> bool:
        """Give *thread* up if it runs a call (past its bound, unless *force*); whether it was."""
        slot = self._slots[thread]
        with slot.lock:
            if slot.tag is None:
                return False
            if not force and (slot.deadline is None or time.monotonic() < slot.deadline):
                return False
            slot.abandoned = True
            tag = slot.tag
        self._threads.remove(thread)
        del self._slots[thread]
        self._abandoned.append(thread)
        logger.warning(
            "A pass on thread %s %s",
            thread.name,
            "still runs as the worker stops: the thread is abandoned, its lease will expire"
            if force
            else "did not return past its timeout: the thread is abandoned and replaced",
        )
        self._done.put(Done(tag, error=Abandoned(f"pass still running on {thread.name}")))
        return True

    def _serve(self, slot: Slot) -> None:
        on_this_thread.slot = slot
        generation = -1
        try:
            while (task := self._next()) is not None:
                if task.generation != generation:
                    generation = task.generation
                    close_old_connections()  # as the worker does between its drives (§13)
                with slot.lock:
                    slot.tag = task.tag
                try:
                    done = Done(task.tag, value=task.call())
                except BaseException as exc:  # handed back, never lost with the thread
                    done = Done(task.tag, error=exc)
                    close_old_connections()  # a broken connection is reopened next time
                else:
                    # A database error the call handed back as a value (a pass's, D4):
                    # a connection it left unusable is reopened on next use (F4).
                    drop_lost_connections()
                put_back()  # on Django's pool, an idle thread holds none (§13)
                with slot.lock:
                    abandoned = slot.abandoned
                    slot.tag = slot.deadline = None
                if abandoned:  # F13: replaced meanwhile; what it did was handed back already
                    logger.warning(
                        "An abandoned pass on thread %s returned; the thread ends",
                        threading.current_thread().name,
                    )
                    return
                self._done.put(done)
                self.ended.set()
        finally:
            connections.close_all()  # this thread's connections only

    def _next(self) -> _Call | None:
        """The next call; while waiting for it, give back this thread's connection (F10)."""
        while True:
            try:
                return self._calls.get(timeout=IDLE_CLOSE)
            except queue.Empty:
                if self._scarce.is_set() or not _persistent():
                    connections.close_all()  # this thread's connections only
                else:
                    close_old_connections()  # CONN_MAX_AGE respected
