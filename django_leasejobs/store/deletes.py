"""What an operator's delete writes: runs that hold no key, with what hangs off them (A7).

A run holding its coalescing key -- running, held, or cancelled while its pass
is still in flight (§3) -- is never deleted. Deleting it would free the key
while a pass of it may still be running, and a ``start()`` of the same (job,
instance) would then make a second run that a drive completes beside that
pass (R1, L1). So the test is in the run ``DELETE``'s own ``WHERE`` clause:
a run that holds a key by the time the statement runs is kept, whatever the
page that asked showed a moment before.

The rows are deleted as retention deletes them (:mod:`..retention`): by key,
with no collector, so no row is loaded into Python (one the backend cannot
read back is deleted too) and no ``pre_delete`` / ``post_delete`` signal is
sent.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction
from django.db.models import QuerySet

from django_leasejobs.models import Missed, Run, Schedule, Step, TaskAttempt

from .base import alias, conflicts_retried, runs

__all__ = ["delete_finished", "free_of_key", "with_live_key"]

#: The most runs one transaction deletes: one parameter each, within SQLite's 999.
BATCH = 500
#: How often a batch is tried again when a run went between the read and the delete.
ROUNDS = 3


def with_live_key(rows: QuerySet[Run]) -> QuerySet[Run]:
    """The runs of *rows* that hold their coalescing key: never deleted (A7)."""
    return rows.filter(live_key__isnull=False)


def free_of_key(rows: QuerySet[Run]) -> QuerySet[Run]:
    """The runs of *rows* that hold no key: finished, their pass (if any) stopped."""
    return rows.filter(live_key__isnull=True)


class _Changed(Exception):
    """A run of the batch went between the read and the delete: the batch is rolled back."""


@conflicts_retried
def delete_finished(run_ids: Sequence[str]) -> list[str]:
    """Delete the runs of *run_ids* that hold no key, with their steps and task attempts.

    The schedules and missed due times that point at a deleted run keep
    existing, pointing at none (as retention leaves them). Each batch of
    runs is one transaction.

    Parameters
    ----------
    run_ids
        The runs to delete.

    Returns
    -------
    list[str]
        The ids deleted, in the order given. One left out held its key when
        the ``DELETE`` ran (it is live, or cancelled with its pass still in
        flight) or was no longer stored; nothing of it was changed.
    """
    wanted = list(dict.fromkeys(run_ids))
    deleted: set[str] = set()
    for start in range(0, len(wanted), BATCH):
        deleted.update(_delete_batch(wanted[start : start + BATCH]))
    return [pk for pk in wanted if pk in deleted]


def _delete_batch(batch: list[str]) -> list[str]:
    using = alias()
    for _ in range(ROUNDS):
        try:
            with transaction.atomic(using=using):
                return _delete_once(using, batch)
        except _Changed:
            continue  # rolled back, the steps too: read the batch again
    return []  # lost the race each time: say none went, as nothing did


def _delete_once(using: str, batch: list[str]) -> list[str]:
    free = free_of_key(runs().filter(pk__in=batch))
    pks = list(free.values_list("pk", flat=True))
    if not pks:
        return []
    # What points at the runs goes first (MariaDB checks a foreign key at once),
    # in retention's order, so a prune of the same runs never deadlocks with this.
    Schedule.objects.using(using).filter(last_run__in=pks).update(last_run=None)
    Missed.objects.using(using).filter(run__in=pks).update(run=None)
    Step.objects.using(using).filter(run__in=pks)._raw_delete(using)
    TaskAttempt.objects.using(using).filter(run__in=pks)._raw_delete(using)
    # The compare-and-set: the key test again, in the DELETE itself. A run it
    # keeps (it took a key meanwhile, or another delete took it) rolls the
    # batch back, so no run loses its steps and stays.
    if free.filter(pk__in=pks)._raw_delete(using) != len(pks):
        raise _Changed
    return pks
