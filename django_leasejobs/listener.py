"""The ``--loop`` worker's ear on PostgreSQL: LISTEN on a connection of its own (SPEC W2).

Every write that makes a run due sooner -- a start, a kick's follow-up, a
retry, a released run -- sends ``NOTIFY`` on :data:`~.store.base.CHANNEL` in
its own transaction, so the notification arrives when that transaction
commits and never for a rollback. An idle worker blocked here wakes within
milliseconds instead of at its next poll.

The connection is the worker's alone: it only listens, so no query of the
drive can consume a notification meant for the wait. At start the worker
checks that it hears its own notification, sent on the runs' connection --
through a transaction-pooling PgBouncer it would not, and the worker then
says so once and polls.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from django.db import DatabaseError, connections

from .conf import conf
from .errors import one_line
from .pooled import unpooled
from .store.base import CHANNEL, alias
from .times import duration

__all__ = ["Listener"]

logger = logging.getLogger("django_leasejobs")

#: How long the self-test waits to hear its own notification.
SELF_TEST_SECONDS = 5.0
#: How often a wait looks up to see whether the worker is stopping.
SLICE_SECONDS = 0.25


class Listener:
    """LISTEN on a dedicated connection, and wait for the next notification."""

    def __init__(self, wrapper: Any) -> None:
        self._wrapper = wrapper

    @classmethod
    def open(cls) -> Listener | None:
        """A listener that has heard its own notification, or ``None`` (then poll).

        ``None`` where LISTEN does not apply: notifications off, not
        PostgreSQL, or no notification came back (a pooler in the way).
        """
        runs = alias()
        listen_on = conf.LISTEN_DATABASE or runs
        if not conf.NOTIFY or connections[listen_on].vendor != "postgresql":
            return None
        wrapper = connections.create_connection(listen_on)
        wrapper.settings_dict = unpooled(wrapper.settings_dict)  # a session of its own
        listener = cls(wrapper)
        try:
            wrapper.ensure_connection()
            wrapper.connection.execute(f"LISTEN {CHANNEL}")
            heard = listener._self_test(runs)
        except (DatabaseError, wrapper.Database.Error) as exc:  # type: ignore[attr-defined]
            # Past ensure_connection() the calls are psycopg's own, and so are
            # their errors: a connection dropped mid-test is one of them.
            logger.warning("LISTEN is not possible (%s): polling instead", one_line(exc))
            listener.close()
            return None
        if not heard:
            logger.warning(
                "LISTEN heard nothing of its own NOTIFY within %s (a transaction-pooling "
                "PgBouncer? set LEASEJOBS['LISTEN_DATABASE'] to a direct connection): "
                "polling instead",
                duration(SELF_TEST_SECONDS),
            )
            listener.close()
            return None
        return listener

    def wait(
        self, timeout: float, stopping: Callable[[], bool], every: float = SLICE_SECONDS
    ) -> bool:
        """Block until notified, *timeout* passes or *stopping* says so; ``True`` if notified.

        *stopping* is asked *every* so many seconds. A burst of notifications
        is one wake-up: those already waiting are read at once, so one drive
        answers them all (debounce).
        """
        deadline = time.monotonic() + timeout
        while not stopping():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self._heard(min(left, every)):
                self.drain()
                return True
        return False

    def drain(self) -> int:
        """Read every notification already here, without waiting; return how many.

        A busy worker calls this after each drive: what it has not read stays
        in the connection's socket, and a server whose listener does not read
        cannot trim its notification queue -- which, once full, refuses every
        ``NOTIFY``, and with it every ``start()``.
        """
        return sum(1 for _notify in self._wrapper.connection.notifies(timeout=0))

    def close(self) -> None:
        with contextlib.suppress(DatabaseError):  # gone already: nothing to close
            self._wrapper.close()

    def _heard(self, timeout: float) -> bool:
        for _notify in self._wrapper.connection.notifies(timeout=timeout, stop_after=1):
            return True
        return False

    def _self_test(self, runs: str) -> bool:
        """Send a notification on the runs' own connection; hear it here (W2)."""
        with connections[runs].cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, 'self-test')", [CHANNEL])
        return self._heard(SELF_TEST_SECONDS)
