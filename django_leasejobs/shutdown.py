"""How a ``--loop`` worker stops: its signals, ``stop_timeout`` and the watchdog (SPEC D5, F13).

The first SIGTERM or SIGINT lets the pass in flight finish, then the loop
ends. With a ``stop_timeout``, a pass still running that long after the
signal is released at its next step boundary (no attempt charged, due again
at once). A second signal exits at once; the lease it held simply expires.
Nothing the worker does not hold is ever released.

A pass whose handler never returns (F13) does not keep a stopping worker
alive: :data:`~.hung.HUNG_GRACE` after ``stop_timeout`` the passes still in
flight are abandoned (their leases expire, the runs are taken over) and the
loop ends; should the loop's own thread be the one stuck in a handler
(``--concurrency 1``), a watchdog flushes the statistics and exits the
process :data:`EXIT_GRACE` after that.

Apart from :mod:`.worker` because a stop is asked from outside the loop -- a
signal handler, a test, another thread -- and only read by the loop:
:class:`Shutdown` says whether a stop was asked, how long ago against
``stop_timeout``, and lets a rest end the moment one is.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from .hung import HUNG_GRACE
from .stats import aggregate
from .times import duration

__all__ = ["EXIT_GRACE", "Shutdown"]

logger = logging.getLogger("django_leasejobs")

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: How long after ``stop_timeout`` (and the pool's :data:`HUNG_GRACE`) a worker whose
#: own thread is stuck in a handler is ended by its watchdog (F13).
EXIT_GRACE = 5.0


class Shutdown:
    """A worker's stop: whether it was asked, and when, against ``stop_timeout``.

    Asked from a signal handler or another thread, read by the loop: the
    time is written before the event is set, so a reader that sees the
    event sees the time.
    """

    def __init__(self, stop_timeout: float | None) -> None:
        self.stop_timeout = stop_timeout
        self._asked_at: float | None = None
        self._asked = threading.Event()

    @property
    def asked(self) -> bool:
        return self._asked.is_set()

    def ask(self, signum: int | None = None) -> None:
        """Stop after the pass in flight; a second signal exits at once."""
        if self._asked.is_set() and signum is not None:
            logger.warning("Second signal %s: exiting now; held leases will expire", signum)
            os._exit(128 + signum)
        # Marked before the log line: a second signal can arrive while the first is
        # being logged, and its handler, run inside this one, must see the first.
        self._asked_at = time.monotonic()
        self._asked.set()
        if signum is not None:
            logger.info("Worker stopping after the pass in flight (signal %s)", signum)
            if self.stop_timeout is not None:
                self._watch(signum)

    def wait(self, seconds: float) -> None:
        """Rest *seconds*, or less if a stop is asked meanwhile."""
        self._asked.wait(seconds)

    def wait_until(self, seconds: float, woken: Callable[[], bool], every: float) -> None:
        """Rest *seconds*, or less if a stop is asked or *woken* says so (asked *every* s)."""
        deadline = time.monotonic() + seconds
        while not woken() and (left := deadline - time.monotonic()) > 0:
            if self._asked.wait(min(left, every)):
                return

    def overdue(self) -> bool:
        """Whether a stop was asked more than ``stop_timeout`` seconds ago."""
        return self._since_asked(0.0)

    def past_grace(self) -> bool:
        """Whether the passes in flight are to be abandoned: ``stop_timeout`` and
        :data:`HUNG_GRACE` have passed since the stop was asked (F13)."""
        return self._since_asked(HUNG_GRACE)

    def _since_asked(self, grace: float) -> bool:
        asked = self._asked_at
        return (
            asked is not None
            and self.stop_timeout is not None
            and time.monotonic() - asked >= self.stop_timeout + grace
        )

    def _watch(self, signum: int) -> None:
        """End the process if it has not ended well past ``stop_timeout`` (F13).

        The loop's own thread may be the one stuck in a handler that never
        returns: nothing else would ever end the process.
        """
        assert self.stop_timeout is not None
        seconds = self.stop_timeout + HUNG_GRACE + EXIT_GRACE

        def end() -> None:
            logger.error(
                "Worker still running %s after the stop was asked: a handler does not return; "
                "exiting, its lease will expire",
                duration(seconds),
            )
            aggregate.flush(force=True)  # O1: the last figures; never raises
            os._exit(128 + signum)

        watchdog = threading.Timer(seconds, end)
        watchdog.daemon = True
        watchdog.name = "leasejobs-stop-watchdog"
        watchdog.start()


def handle_signals(handler: Callable[[int, FrameType | None], None]) -> dict[int, Any]:
    """Have SIGTERM and SIGINT call *handler*; return the handlers they had, to put back.

    Nothing in a thread other than the main one: only it may set a handler.
    """
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {signum: signal.signal(signum, handler) for signum in _STOP_SIGNALS}
