"""L10: a pass's lease renewed from a side thread, for handlers with no step boundaries.

A handler that makes one long call -- a report query, an upload, a Django
task's function -- never reaches a step boundary, so nothing renews its lease
(L7) and another worker would take it over while it still runs. With
``@job(heartbeat=True)`` a thread renews the lease about every third of it
while the pass runs. Each renewal is L7's own: one fenced ``UPDATE`` on the
database clock, sent on the thread's own connection (Django's connections
are per thread), which the thread closes when it ends.

A renewal that finds the lease gone marks the pass lost: its later writes
are refused (L6) and its outcome is ``superseded``. A renewal that fails on a
connection the database ended (F4) is sent again at once on a new one: the
pass loses its lease only if the lease really ran out, never for the loss of
a connection. Past the job's
``timeout`` the thread stops renewing, so the lease runs out and the run is
taken over (charged, L3) even if the handler never returns: the timeout is
what bounds a pass that hangs, not the life of its process.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from django.db import DatabaseError, connections

from . import store
from .errors import drop_lost_connections, one_line
from .leases import Countdown
from .pooled import put_back
from .verdicts import Verdict

if TYPE_CHECKING:
    from .leases import Lease

__all__ = ["BEAT_SHARE", "Heartbeat"]

logger = logging.getLogger("django_leasejobs")

#: How often the lease is renewed, as a share of it: three beats per lease,
#: so one lost renewal (a blip of the database) still leaves a third in hand.
BEAT_SHARE = 1 / 3


class Heartbeat:
    """Renew the pass's *lease* while the ``with`` block runs."""

    def __init__(self, lease: Lease) -> None:
        self._lease = lease
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, name=f"leasejobs-heartbeat-{lease.run_id}", daemon=True
        )

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        # Stopped and joined before the pass's outcome is written, so no
        # renewal can land after the commit or settle released the lease.
        self._stopped.set()
        self._thread.join()

    def _beat(self) -> None:
        lease, countdown = self._lease, self._lease.countdown
        interval = countdown.lease.total_seconds() * BEAT_SHARE
        try:
            while not self._stopped.wait(interval):
                if lease.record.timed_out():
                    return  # R10: let the lease run out; the run will be taken over
                sent = Countdown.now()
                held = self._renew()
                put_back()  # on Django's pool, held between beats by none (§13)
                if held is None:
                    continue  # the lease may well still hold: try again at the next beat
                if not held:
                    lease.record.decide(Verdict.LOST)
                    return
                countdown.renewed(sent)
        finally:
            connections.close_all()  # this thread's connections only

    def _renew(self) -> bool | None:
        """L7's renewal; ``None`` when it could not be sent, even on a new connection (F4)."""
        lease = self._lease
        for again in (False, True):
            try:
                return store.renew(
                    lease.run_id, lease.owner, lease.countdown.lease, strict=lease.strict
                )
            except DatabaseError as exc:
                logger.warning(
                    "Heartbeat of run id=%s could not renew its lease (%s)%s",
                    lease.run_id,
                    one_line(exc),
                    "" if again else "; again on a new connection",
                )
                drop_lost_connections()  # a connection the database ended opens anew
        return None
