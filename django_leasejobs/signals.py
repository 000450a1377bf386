"""Signals a site can connect to (Sentry, email, metrics), and the one way they are sent.

Each is sent once the transaction that caused it commits, with ``sender`` =
the :class:`~django_leasejobs.models.Run` (or ``Schedule``) class. The
library's own log lines for them are receivers too (:mod:`.signal_handlers`).
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from django.db import transaction
from django.dispatch import Signal

__all__ = [
    "job_overdue",
    "run_completed",
    "run_failed",
    "run_held",
    "schedule_missed",
    "send",
    "send_now",
]

logger = logging.getLogger("django_leasejobs")

#: A run finished: status ``done``. Keyword arguments: ``run``.
run_completed = Signal()

#: A run failed for good (status ``failed``). Keyword arguments: ``run``,
#: ``failure_code``, ``error`` (the stored ``last_error`` text).
run_failed = Signal()

#: A run of a job that is not safe to repeat was interrupted and waits for an
#: operator (status ``held``, SPEC L3). Keyword arguments: ``run``.
run_held = Signal()

#: A schedule recorded missed due times (SPEC S3). Keyword arguments:
#: ``schedule``, ``due_times`` (the recorded ones, a list), ``cause``, ``action``
#: and ``dropped`` (how many older due times were only counted).
schedule_missed = Signal()

#: A scheduled job is overdue, sent once per episode (SPEC S6). Keyword
#: arguments: ``schedule``, ``state``.
job_overdue = Signal()


def send(signal: Signal, sender: type, *, using: str, **kwargs: Any) -> None:
    """Send *signal* once the transaction on *using* commits (at once, outside one).

    A receiver that raises is logged, never allowed to stop a drive: the
    outcome it reports is already stored.
    """
    transaction.on_commit(partial(send_now, signal, sender, **kwargs), using=using)


def send_now(signal: Any, sender: type, **kwargs: Any) -> None:
    """Send *signal* at once; a receiver that raises is logged, never raised.

    Also how Django's task signals are sent (:mod:`.tasks`): ``task_enqueued``
    inside the caller's transaction, as Django's own backends send it.
    """
    for receiver, response in signal.send_robust(sender=sender, **kwargs):
        if isinstance(response, Exception):
            logger.error(
                "Signal receiver %s raised %s",
                getattr(receiver, "__qualname__", receiver),
                type(response).__name__,
                exc_info=response,
            )
