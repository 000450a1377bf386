"""A pool of threads that run passes, each on a database connection of its own (SPEC W5, §13).

Django's connections are per thread, so a pass on a pool thread writes on
that thread's connection -- its BEGIN, its steps, its commit -- and the
connection is kept from one pass to the next, as a ``--loop`` worker keeps
its own (§13). After the worker rested -- never between the back-to-back
drives of a backlog -- each thread lets go of a connection past
``CONN_MAX_AGE`` or broken (``close_old_connections``) before its next pass,
so even with Django's default ``CONN_MAX_AGE = 0`` a draining pool does not
reconnect every few passes; when the pool closes, every thread closes its
connections and ends. A connection the database ended while a call ran
(``pg_terminate_backend``, ``KILL``) is closed when the call ends, so the
thread's next pass opens a new one (F4) instead of failing on the old.

The pool runs whatever callable it is given and hands back what it
returned or raised, in the order the calls end; it knows nothing of runs.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from django.db import close_old_connections, connections

from .errors import drop_lost_connections

__all__ = ["Done", "Pool"]

logger = logging.getLogger("django_leasejobs")


class Done(NamedTuple):
    """One call that ended: the *tag* it was given with, and what it returned or raised."""

    tag: Any
    value: Any = None
    error: BaseException | None = None


class _Call(NamedTuple):
    tag: Any
    call: Callable[[], Any]
    generation: int


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
        self._busy = 0
        #: Bumped when the worker rests: a thread then lets go of stale connections first.
        self._generation = 0

    @property
    def busy(self) -> int:
        """Calls submitted and not yet collected with :meth:`wait`."""
        return self._busy

    def free(self) -> int:
        """How many more calls would start at once: the idle threads."""
        return max(0, self.size - self._busy)

    def room(self) -> int:
        """How many more calls may be submitted: idle threads, then the backlog's places."""
        return self.size + self.backlog - self._busy

    def rested(self) -> None:
        """The worker rested: each thread checks its connection before its next call."""
        self._generation += 1

    def submit(self, tag: Any, call: Callable[[], Any]) -> None:
        """Run *call* on a free thread; its :class:`Done` comes back from :meth:`wait`."""
        if self._busy >= self.size + self.backlog:
            raise RuntimeError("every thread of the pool is busy, and its backlog full")
        self._busy += 1
        if len(self._threads) < min(self.size, self._busy):
            thread = threading.Thread(
                target=self._serve, name=f"{self._name}-{len(self._threads) + 1}", daemon=True
            )
            self._threads.append(thread)
            thread.start()
        self._calls.put(_Call(tag, call, self._generation))

    def wait(self, timeout: float | None = None) -> list[Done]:
        """The calls that ended: at least one, waiting up to *timeout* (``None``: for ever).

        Returns an empty list when *timeout* passed first, or when nothing is busy.
        """
        if not self._busy:
            return []
        try:
            ended = [self._done.get(timeout=timeout)]
        except queue.Empty:
            return []
        while True:
            try:
                ended.append(self._done.get_nowait())
            except queue.Empty:
                break
        self._busy -= len(ended)
        return ended

    def close(self) -> None:
        """Let each thread finish its call, close its connections and end."""
        for _thread in self._threads:
            self._calls.put(None)
        for thread in self._threads:
            thread.join()
        self._threads.clear()

    def _serve(self) -> None:
        generation = -1
        try:
            while (task := self._calls.get()) is not None:
                if task.generation != generation:
                    generation = task.generation
                    close_old_connections()  # as the worker does between its drives (§13)
                try:
                    done = Done(task.tag, value=task.call())
                except BaseException as exc:  # handed back, never lost with the thread
                    done = Done(task.tag, error=exc)
                    close_old_connections()  # a broken connection is reopened next time
                else:
                    # A database error the call handed back as a value (a pass's, D4):
                    # a connection it left unusable is reopened on next use (F4).
                    drop_lost_connections()
                self._done.put(done)
        finally:
            connections.close_all()  # this thread's connections only
