"""The database connections a worker process holds: ``leasejobs_database_connections`` (W5)."""

from __future__ import annotations

import threading
import weakref
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created

from django_leasejobs.contained import contained

__all__ = ["OpenConnections"]


class OpenConnections:
    """The database connections this process holds open, whichever thread opened them.

    Django's connections are per thread, so no thread can list another's.
    Each connection opened is noted (Django's ``connection_created`` signal)
    -- the drive's own, each pass thread's (W5), each heartbeat's (L10), the
    LISTEN connection (W2), and any a handler opens on its own thread -- and
    a scrape counts those still open. A connection whose thread has ended is
    forgotten with it (weak references).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: weakref.WeakSet[BaseDatabaseWrapper] = weakref.WeakSet()
        self._uid = f"django_leasejobs.metrics.OpenConnections-{id(self)}"

    def start(self) -> None:
        """Note the connections this thread has open already, and each one opened from now."""
        connection_created.connect(self._opened, weak=False, dispatch_uid=self._uid)
        with self._lock:
            for wrapper in connections.all(initialized_only=True):
                self._seen.add(wrapper)

    def stop(self) -> None:
        connection_created.disconnect(dispatch_uid=self._uid)

    def _opened(self, sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
        # Sent as a connection opens: what fails here must not fail the connect (F12).
        with contained("Connection metrics"), self._lock:
            self._seen.add(connection)

    def count(self) -> int:
        with self._lock:
            wrappers = list(self._seen)
        return sum(1 for wrapper in wrappers if wrapper.connection is not None)
