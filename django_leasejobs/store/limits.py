"""Flow control's writes (SPEC C2, C3): a limited pass begins only with a slot and a rate token.

A pass of a limited job begins in one transaction of compare-and-sets: take
a free concurrency slot (C2), spend the rate's next begin (C3), then L4's
BEGIN. If any of them refuses, the transaction rolls back and nothing was
taken. The slot needs no release of its own: it is held while the run it
names holds the lease it names, begun and unexpired, so the lease's renewals
renew it and the pass's outcome -- which lets go of the lease -- frees it in
the same statement. A crashed pass's slot frees when its lease expires.

A refused pass is *throttled* (:func:`throttle`): its claim is let go with
nothing charged, due again in a second (a slot) or when the rate next allows
a begin (a rate).

The statements a limited pass adds to an unlimited one's: the slot read and
its compare-and-set (concurrency), the rate's conditional ``UPDATE`` (rate).
Each limit's state rows are created the first time its key is limited.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from django.db import connections, transaction
from django.db.models import DurationField, Exists, ExpressionWrapper, F, OuterRef, Q

from django_leasejobs.clock import plus
from django_leasejobs.limits import Limit, Rate
from django_leasejobs.models import RateState, Run, Slot
from django_leasejobs.states import Throttle

from .base import alias, conflicts_retried, fenced, now, runs
from .claims import BEGIN_LIMITED
from .held_back import due_again, last_held, spaced, spaced_too_far
from .unanswered import Unanswered, unanswered_if_lost

__all__ = [
    "THROTTLE_WAIT",
    "THROTTLE_WAIT_MIN",
    "Admission",
    "begin_limited",
    "prune_idle",
    "rate_states",
    "rejudge",
    "slots_in_use",
    "throttle",
]

#: How soon a run refused a concurrency slot is due again, at most (C2: "within
#: about a second"), and at least: the drive waits about one of the job's passes,
#: the time a slot takes to free, between the two.
THROTTLE_WAIT = timedelta(seconds=1)
THROTTLE_WAIT_MIN = timedelta(milliseconds=50)
#: How many free slots a begin tries before it counts the job as full: one
#: lost to another worker is normal, three in a row mean the slots are going fast.
TRIES = 3
#: The most free slots one transaction of :func:`prune_idle` locks and deletes.
PRUNE_BATCH = 500
#: A new rate state's first begin is allowed at once.
_LONG_AGO = datetime(2000, 1, 1, tzinfo=UTC)


class Admission(NamedTuple):
    """What a limited BEGIN came to: begun, a miss (L5), or throttled by a limit."""

    begun: bool
    throttle: Throttle | None = None
    #: A rate's next allowed begin, by the database's clock (``None``: soon).
    until: datetime | None = None
    #: How long after the refusal that is, by the same clock (``None``: not read).
    left: timedelta | None = None


class _Refused(Exception):
    def __init__(self, admission: Admission) -> None:
        self.admission = admission


@conflicts_retried
def begin_limited(
    run_id: str, owner: str, margin: timedelta, *, job: str, key: str, limit: Limit
) -> Admission:
    """L4's BEGIN for a pass of a limited job, with its slot and rate token (C2, C3).

    *key* is the run's ``limit_key`` (``""`` for the job's own limit).
    """
    using = alias()
    free: list[tuple[int, str | None]] = []
    if limit.concurrency is not None:
        # Read before the transaction: on SQLite a transaction that reads
        # first cannot write once another has (its snapshot is stale).
        free = _free_slots(job, key, limit.concurrency)
        if not free:
            return Admission(False, Throttle.CONCURRENCY)
    try:
        with unanswered_if_lost(Unanswered(run_id, owner)), transaction.atomic(using=using):
            if free and not _take(free, run_id, owner):
                raise _Refused(Admission(False, Throttle.CONCURRENCY))
            if limit.rate is not None and (next_begin := _spend(job, key, limit.rate)):
                raise _Refused(Admission(False, Throttle.RATE, *next_begin))
            if not BEGIN_LIMITED.run(using, run_id=run_id, owner=owner, margin=margin):
                raise _Refused(Admission(False))
    except _Refused as refused:
        return refused.admission
    return Admission(True)


def _holding() -> Any:
    """Whether a slot's holder still holds it: its run, in flight under the lease it names."""
    return Run.objects.in_flight(now()).filter(pk=OuterRef("run_id"), lease_owner=OuterRef("owner"))


def _slots(job: str, key: str) -> Any:
    """The slots of (*job*, *key*), each annotated with whether its holder still holds it."""
    return Slot.objects.using(alias()).filter(job=job, key=key).annotate(held=Exists(_holding()))


def _free_slots(job: str, key: str, concurrency: int) -> list[tuple[int, str | None]]:
    """The free slots among the first *concurrency*, each with the holder it was seen with."""
    slots = _slots(job, key).filter(number__lt=concurrency).values_list("pk", "owner", "held")
    rows = list(slots)
    if len(rows) < concurrency:
        # A key limited for the first time, or a job whose concurrency grew.
        Slot.objects.using(alias()).bulk_create(
            [Slot(job=job, key=key, number=number) for number in range(concurrency)],
            ignore_conflicts=True,
        )
        rows = list(slots.all())  # read again: the first read's rows are cached
    free = [(pk, owner) for pk, owner, held in rows if not held]
    random.shuffle(free)  # workers beginning together seldom reach for the same slot
    return free


def _take(free: list[tuple[int, str | None]], run_id: str, owner: str) -> bool:
    """Compare-and-set one of the *free* slots to this pass: it wins if no one took it since."""
    slots = Slot.objects.using(alias())
    for pk, seen in free[:TRIES]:
        found = slots.filter(pk=pk)
        found = found.filter(owner=seen) if seen is not None else found.filter(owner__isnull=True)
        if found.update(owner=owner, run_id=run_id):
            return True
    return False


def _spend(job: str, key: str, rate: Rate) -> tuple[datetime, timedelta] | None:
    """C3: take the rate's next begin; ``None`` if taken, else when the next is allowed.

    The rate state is a theoretical arrival time: a begin is allowed when it
    is not after now, and pushes it to now + ``per / n`` -- one conditional
    ``UPDATE`` on the database clock. Refused, the next allowed begin is read
    with how far ahead of now it is, by the same clock, and in the same
    statement when the key's last run held back falls due
    (:func:`.held_back.last_held`): the refused pass waits behind it.
    """
    states = RateState.objects.using(alias()).filter(job=job, key=key)
    at = now()
    if states.filter(tat__lte=at).update(tat=plus(at, rate.interval)):
        return None
    ahead = ExpressionWrapper(F("tat") - at, output_field=DurationField())
    refused = states.annotate(left=ahead, behind=last_held(job, key))
    found = refused.values_list("tat", "left", "behind").first()
    if found is not None:
        return _waits_behind(found, rate)
    RateState.objects.using(alias()).bulk_create(
        [RateState(job=job, key=key, tat=_LONG_AGO)], ignore_conflicts=True
    )
    if states.filter(tat__lte=at).update(tat=plus(at, rate.interval)):
        return None
    found = refused.values_list("tat", "left", "behind").first()
    return None if found is None else _waits_behind(found, rate)


def _waits_behind(
    found: tuple[datetime, timedelta, datetime | None], rate: Rate
) -> tuple[datetime, timedelta]:
    """When a pass its rate refused is due again: the rate's next begin, or one spacing after
    the key's last run held back already, whichever is later (C3, §13); and how far ahead
    the rate's next begin is."""
    tat, left, behind = found
    return (tat if behind is None else max(tat, behind + spaced(rate.interval))), left


@conflicts_retried
def throttle(
    run_id: str, owner: str, which: Throttle, until: datetime | None, wait: timedelta
) -> bool:
    """Let go of a claim its limit refused: nothing charged, due again when it may begin.

    ``False`` when *owner* no longer holds an unbegun claim on the run.
    """
    at = now()
    return bool(
        fenced(run_id, owner)
        .unbegun()
        .update(
            lease_owner=None,
            next_attempt_at=due_again(at, wait, until),
            throttled_by=which,
            updated_at=at,
        )
    )


@conflicts_retried
def rejudge(jobs: tuple[str, ...], limit: Limit | None) -> int:
    """C5: bring what *jobs*' runs wait for under *limit*, their limit as the code says now.

    A looser or removed limit must not be waited out under the old rule. A
    rate's state never looks further ahead than one interval of the new rate
    (under an unchanged rule it never does, so this writes nothing), and a
    run held back for longer than the new rule would hold it -- by a rate
    now faster or gone, or by a concurrency limit now gone -- is due now, to
    be judged afresh by the drive that follows. A stricter rule needs
    nothing: it holds from the next begin on. Returns how many runs moved.
    """
    at = now()
    rate = None if limit is None else limit.rate
    states = RateState.objects.using(alias()).filter(job__in=jobs)
    stale = Q(throttled_by=Throttle.RATE) if rate is None else Q(pk__in=spaced_too_far(jobs, rate))
    if limit is None or limit.concurrency is None:
        stale |= Q(throttled_by=Throttle.CONCURRENCY)
    with transaction.atomic(using=alias()):
        if rate is None:
            states.delete()
        else:
            ahead = plus(at, rate.interval)
            states.filter(tat__gt=ahead).update(tat=ahead)
        return (
            runs()
            .waiting()
            .filter(stale, job__in=jobs, next_attempt_at__gt=at)
            .update(next_attempt_at=at, throttled_by="", updated_at=at)
        )


def prune_idle() -> int:
    """Delete flow control's idle state: free slots, and rate states already passed (§14).

    Both are what a missing row means -- a free slot, a begin allowed now --
    so deleting them changes no decision; a key limited again gets them back.

    A slot is deleted in two statements, never one. A single ``DELETE ...
    WHERE NOT EXISTS (its holder holds it)`` that waits on a slot being
    taken re-checks, once the taker commits, the slot's new holder against
    the runs as they were when the ``DELETE`` began -- before that pass's
    BEGIN -- and deletes a held slot; the key then gets a fresh one, and one
    pass more than its concurrency runs (C2). So the free slots are locked
    first, and only those still free by a second, later read are deleted:
    a slot can change hands only under its row lock, which this transaction
    holds by then.
    """
    using = alias()
    idle = Slot.objects.using(using).filter(~Exists(_holding()))
    if connections[using].features.has_select_for_update:
        deleted, after = 0, 0
        while True:  # in batches along the primary key, each its own short transaction
            with transaction.atomic(using=using):
                locked = idle.filter(pk__gt=after).order_by("pk").select_for_update()
                batch = list(locked.values_list("pk", flat=True)[:PRUNE_BATCH])
                if batch:
                    deleted += idle.filter(pk__in=batch)._raw_delete(using)
            if len(batch) < PRUNE_BATCH:
                break
            after = batch[-1]
    else:
        # SQLite: one writer at a time, so the one statement sees what it deletes.
        deleted = idle._raw_delete(using)
    rates = RateState.objects.using(using).filter(tat__lt=now())._raw_delete(using)
    return int(deleted) + int(rates)


def slots_in_use(job: str) -> dict[str, int]:
    """How many of *job*'s slots are held, per key (C5: ``leasejobs_status``)."""
    held: dict[str, int] = {}
    slots = Slot.objects.using(alias()).filter(job=job).annotate(held=Exists(_holding()))
    for key in slots.filter(held=True).values_list("key", flat=True):
        held[key] = held.get(key, 0) + 1
    return held


def rate_states(job: str) -> dict[str, datetime]:
    """When each key of *job* may next begin a pass by its rate (C5)."""
    states = RateState.objects.using(alias()).filter(job=job)
    return dict(states.values_list("key", "tat"))
