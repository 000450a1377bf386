"""The long-lived loop behind ``rundueJobs --loop`` (SPEC D5, W1, W2, §13).

One drive after another. A drive that did work is followed by the next at
once, so a backlog drains at the worker's full speed (W1); only after a drive
that found nothing due (or could not run) does the worker rest -- until a
notification of new work arrives (W2, PostgreSQL) or ``interval`` seconds
pass. The connection is kept for the passes of a drive and closed/reopened
only between drives, as ``CONN_MAX_AGE`` says (``close_old_connections``).

Stopping -- a signal, ``stop_timeout``, a handler that never returns (F13) --
is :mod:`.shutdown`'s: the loop asks it whether to go on, and whether the
passes in flight are past their time.

When the database refuses connections (F10: ``max_connections`` reached),
a drive that cannot run, or that lost a pass's connection, is followed by a
rest that starts at :data:`RETRY_FIRST` and doubles up to ``interval``
(with jitter, so several workers do not retry in step), never a tight loop;
meanwhile the idle pass threads give their connections back
(:meth:`~.pool.Pool.scarce`), and passes in flight go on.
"""

from __future__ import annotations

import logging
import random
import signal
import time
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

from django.db import DatabaseError, close_old_connections, reset_queries

from .dispatcher import Dispatcher
from .driver import DriveReport, concurrency_of, run_due_jobs, wait_for_passes
from .errors import describe, one_line
from .hung import HUNG_GRACE
from .listener import Listener
from .resting import due_in
from .shutdown import Shutdown, handle_signals
from .stats import aggregate
from .times import duration

__all__ = ["Worker"]

logger = logging.getLogger("django_leasejobs")

#: How long a worker whose LISTEN could not be opened again polls before trying it again.
LISTEN_RETRY = 60.0
#: A rest that ends for a statistics flush (O1) ends this much after it is due.
FLUSH_SLACK = 0.01
#: The first rest after a drive that could not run (F10); it doubles up to ``interval``.
RETRY_FIRST = 0.25
#: While passes are in flight, how often a rest looks up to see whether one ended. Each
#: look is a poll of the LISTEN connection (W2): at 5 ms a worker resting beside one
#: sleeping pass used 18 % of a core; at 50 ms, 2 %.
PASS_ENDED_SLICE = 0.05


class Worker:
    """Drive due runs until asked to stop."""

    def __init__(
        self,
        *,
        interval: float,
        limit: int | None = None,
        max_passes: int | None = None,
        jobs: Iterable[str] | None = None,
        queues: Iterable[str] | None = None,
        concurrency: int | None = None,
        stop_timeout: float | None = None,
        on_report: Callable[[DriveReport], None] = lambda report: None,
    ) -> None:
        self.interval = interval
        self.concurrency = concurrency_of(concurrency)
        #: With concurrency above 1, the pool of pass threads kept across drives (W5).
        self._dispatcher: Dispatcher | None = None
        self.limit = limit
        self.max_passes = max_passes
        self.jobs = list(jobs) if jobs is not None else None
        self.queues = list(queues) if queues is not None else None
        self.on_report = on_report
        self.stop_timeout = stop_timeout
        self._shutdown = Shutdown(stop_timeout)
        self._outage: str | None = None
        #: Drives in a row that could not run or lost a connection: the back-off (F10).
        self._failures = 0
        self._listener: Listener | None = None
        self._listen_at: float | None = None  # when to try LISTEN again, after losing it

    def stop(self, signum: int | None = None, frame: FrameType | None = None) -> None:
        """Ask the loop to stop after the pass in flight; a second signal exits at once."""
        self._shutdown.ask(signum)

    def overdue(self) -> bool:
        """Whether a stop was asked more than ``stop_timeout`` seconds ago."""
        return self._shutdown.overdue()

    @property
    def listening(self) -> bool:
        """Whether notifications wake this worker (W2), rather than its poll alone."""
        return self._listener is not None

    @property
    def stopping(self) -> bool:
        return self._shutdown.asked

    def run(self) -> None:
        previous = handle_signals(self.stop)
        self.open()
        try:
            while not self.stopping:
                self.turn()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self.close()

    def open(self) -> None:
        """Start what the loop keeps for its life: the pass threads (W5) and LISTEN (W2)."""
        if self.concurrency > 1 and self._dispatcher is None:
            self._dispatcher = Dispatcher(self.concurrency)
        self.listen()

    def listen(self) -> None:
        """Open the LISTEN connection, where there can be one (W2); else the loop polls."""
        self._listener = Listener.open()

    def close(self) -> None:
        if self._dispatcher is not None:
            # W5: every pass in flight finishes (or, past --stop-timeout, is released at
            # its next step boundary), and is reported, before the threads close.
            try:
                last = wait_for_passes(self._dispatcher, self._shutdown.past_grace)
                if not last.idle:
                    self.on_report(last)
            finally:
                # Past --stop-timeout, a thread still in a hung pass is left behind (F13).
                self._dispatcher.close(None if self.stop_timeout is None else HUNG_GRACE)
                self._dispatcher = None
        aggregate.flush(force=True)  # O1: the last figures, at exit
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        close_old_connections()

    def turn(self) -> DriveReport | None:
        """One turn of the loop: a drive, then a rest unless it did work (W1, W2)."""
        report = self.drive_once()
        if self.stopping:
            return report
        dispatched = self._dispatcher is not None and self._dispatcher.dispatched
        failed = report is None or bool(report.aborted)
        self._failures = self._failures + 1 if failed else 0
        if self._dispatcher is not None:
            self._dispatcher.scarce(failed)  # F10: idle pass threads give connections back
        if report is not None and not failed and (report.attempted or dispatched):
            self._hear_out()  # what came in meanwhile, the next drive answers
        else:
            close_old_connections()  # CONN_MAX_AGE = 0: no connection held through a rest
            self._rest()
            if self._dispatcher is not None:
                self._dispatcher.rested()  # stale pass connections go before the next drive
        return report

    def _rest(self) -> None:
        """Wait for a notification of new work (W2), the next run due, or ``interval`` (W1).

        Or, with passes in flight (W5), until one of them ends: its outcome
        may make its run due -- a ``Defer``, a retry, a throttle -- which the
        rest's due time could not see while the run was leased, and which no
        notification announces. Without this the rest slept to the next run's
        due time or the interval (a rate's backlog lost a begin each time).
        """
        seconds = self._rest_seconds()
        pool = self._dispatcher.pool if self._dispatcher is not None else None
        ended = pool.ended if pool is not None and pool.busy else None

        def stopping() -> bool:
            return self.stopping or (ended is not None and ended.is_set())

        listener = self._listener
        if listener is None:
            if ended is None:
                self._shutdown.wait(seconds)
            else:
                self._shutdown.wait_until(seconds, stopping, PASS_ENDED_SLICE)
            self._listen_again()
            return
        try:
            if ended is None:
                listener.wait(seconds, stopping)
            else:  # asked often: a pass that ends wakes the worker within PASS_ENDED_SLICE
                listener.wait(seconds, stopping, every=PASS_ENDED_SLICE)
        except Exception as exc:  # psycopg's own errors, from a dropped socket
            self._lost_listener(exc)

    def _rest_seconds(self) -> float:
        """``interval``, or less when a run this worker may drive falls due sooner (W1).

        A throttled run's release, a retry's back-off, a ``Defer``: without
        this, a rate-limited backlog would drain at one begin per interval.
        After a drive that could not run (or lost a connection), a back-off
        from :data:`RETRY_FIRST` doubling up to ``interval`` (F10): the
        database is not asked again in a tight loop.
        """
        if self._failures:
            # F10: not a tight loop, nor a full interval while connections come and go.
            backoff: float = RETRY_FIRST * 2.0 ** min(self._failures - 1, 16)
            return min(self.interval, backoff * random.uniform(0.75, 1.25))
        rest = self.interval
        flush = aggregate.due_in()  # O1: an idle worker writes its last figures in time
        if flush is not None:
            rest = min(rest, flush + FLUSH_SLACK)
        try:
            seconds = due_in(jobs=self.jobs, queues=self.queues)
        except Exception as exc:  # a database error, or a bug: rest the interval, as before W1
            logger.warning("Next due run could not be read (%s); resting", describe(exc))
            return rest
        return rest if seconds is None else min(rest, seconds)

    def _hear_out(self) -> None:
        """Read the notifications that came during a drive, so none piles up (W2)."""
        if self._listener is not None:
            try:
                self._listener.drain()
            except Exception as exc:  # psycopg's own errors, from a dropped socket
                self._lost_listener(exc)

    def _lost_listener(self, exc: Exception) -> None:
        """The LISTEN connection is gone: poll, and LISTEN again after the next rest (W2, F4).

        The database ended that one connection (``pg_terminate_backend``, an
        idle timeout) far more often than it went away: a new one, opened at
        the next rest, listens again. Only if that fails too does the worker
        poll for :data:`LISTEN_RETRY` before trying again.
        """
        logger.warning("LISTEN connection lost (%s): polling", one_line(exc))
        if self._listener is not None:
            self._listener.close()
        self._listener = None
        self._listen_at = time.monotonic()

    def _listen_again(self) -> None:
        """After the LISTEN connection was lost, open it again: now, then now and then."""
        if self._listen_at is not None and time.monotonic() >= self._listen_at:
            self._listener = Listener.open()
            self._listen_at = None if self._listener else time.monotonic() + LISTEN_RETRY

    def drive_once(self) -> DriveReport | None:
        # Between drives: drop connections past CONN_MAX_AGE or broken ones,
        # and the DEBUG query log, so a week-long loop cannot grow.
        close_old_connections()
        reset_queries()
        try:
            report = run_due_jobs(
                limit=self.limit,
                max_passes=self.max_passes,
                jobs=self.jobs,
                queues=self.queues,
                stop=lambda: self.stopping,
                interrupt=self.overdue,
                **self._concurrent(),
            )
        except DatabaseError as exc:
            reason = one_line(exc)
            if self._outage is None:  # Log an outage once, not once per interval.
                logger.error(
                    "Drive could not run: %s; retrying every %s", reason, duration(self.interval)
                )
            self._outage = reason
            close_old_connections()
            return None
        except Exception:
            # A bug, not an outage: say where, and keep the worker (its next
            # drive may well run) rather than exit and leave every run waiting.
            logger.exception("Drive failed; retrying in %s", duration(self.interval))
            close_old_connections()
            return None
        if self._outage is not None:
            logger.warning("Database reachable again; drives resumed")
            self._outage = None
        aggregate.flush()  # O1: at most every STATS_EVERY, never per pass
        self.on_report(report)
        return report

    def _concurrent(self) -> dict[str, Any]:
        """How a drive runs its passes: on this thread, or on the pool kept across drives (W5)."""
        if self._dispatcher is None:
            return {"concurrency": self.concurrency}
        return {"concurrency": self.concurrency, "dispatcher": self._dispatcher}
