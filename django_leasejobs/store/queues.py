"""W6's writes: a queue paused, a queue resumed -- each one compare-and-set.

A paused queue is a row of :class:`~django_leasejobs.models.PausedQueue`.
Pausing inserts it (its queue is unique: of two pauses, one inserts and the
other finds it there), resuming deletes it (of two, one deletes). Both
announce the change (W2) in their own transaction, so an idle worker on
PostgreSQL sees it at once; the drive's due read leaves out paused queues'
runs in the same statement (``RunQuerySet.unpaused()``).
"""

from __future__ import annotations

from django.db import IntegrityError, router, transaction

from django_leasejobs.clock import get_clock
from django_leasejobs.models import PausedQueue

from .base import conflicts_retried, notify

__all__ = ["is_paused", "pause_queue", "paused_queues", "resume_queue"]


def _db() -> str:
    return router.db_for_write(PausedQueue)


@conflicts_retried
def pause_queue(queue: str, by: str, note: str) -> bool:
    """Pause *queue*; ``False`` when it was paused already (and nothing changed)."""
    using = _db()
    try:
        with transaction.atomic(using=using):
            PausedQueue.objects.using(using).create(
                queue=queue, paused_by=by, note=note, paused_at=get_clock().now(using)
            )
            notify(using)
    except IntegrityError:
        return False
    return True


@conflicts_retried
def resume_queue(queue: str) -> bool:
    """Resume *queue*; ``False`` when it was not paused."""
    using = _db()
    with transaction.atomic(using=using):
        deleted, _ = PausedQueue.objects.using(using).filter(queue=queue).delete()
        if deleted:
            notify(using)  # its runs are due again: they make runs due sooner (W2)
    return bool(deleted)


def is_paused(queue: str) -> bool:
    """Whether *queue* is paused now, read where the writes go (a replica may lag, §12)."""
    return PausedQueue.objects.using(_db()).filter(queue=queue).exists()


def paused_queues() -> list[PausedQueue]:
    """Every paused queue, by name."""
    return list(PausedQueue.objects.using(router.db_for_read(PausedQueue)).order_by("queue"))
