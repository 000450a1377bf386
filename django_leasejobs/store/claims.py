"""Claim, read back, begin -- or miss (SPEC L2-L5, L9)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import DurationField, F
from django.db.models.functions import Coalesce

from django_leasejobs.clock import plus
from django_leasejobs.errors import READ_ERRORS, why_unreadable
from django_leasejobs.exceptions import UnreadableRow
from django_leasejobs.leases import ADMISSION, TAKEOVER_NOTE
from django_leasejobs.models import Run
from django_leasejobs.querysets import RunQuerySet
from django_leasejobs.states import FailureCode, RunStatus

from .base import alias, conflicts_retried, fenced, finished, now, runs
from .sql import AS_IS, KEY, Slots, Statement, returns_rows
from .unanswered import Unanswered, unanswered_if_lost

__all__ = [
    "AdmissionMiss",
    "begin",
    "claim",
    "claim_and_read",
    "claimed_elsewhere",
    "let_go",
    "miss",
    "read_claimed",
    "release_dead_holder",
]

_LEASE = {"run_id": KEY, "owner": KEY, "lease": DurationField()}


def _claim(*, takeover: bool) -> Statement:
    def build(runs: RunQuerySet[Run], s: Slots) -> tuple[RunQuerySet[Run], dict[str, Any]]:
        values: dict[str, Any] = {
            "lease_owner": s.owner,
            "lease_holder": s.holder,
            "next_attempt_at": plus(s.now, s.lease),
            "updated_at": s.now,
        }
        if takeover:
            values |= {
                "attempts": F("attempts") + 1,
                "failure_code": FailureCode.LEASE_EXPIRED,
                "last_error": TAKEOVER_NOTE,
                "lease_began_at": None,  # last: MySQL evaluates SET clauses left to right
            }
        return runs.claimable(s.now, took_over=takeover).filter(pk=s.run_id), values

    return Statement({**_LEASE, "holder": AS_IS}, build)


#: L2, L3: the two forms of a claim, a fresh one and a takeover of a begun lease.
CLAIM = {False: _claim(takeover=False), True: _claim(takeover=True)}


#: L4: BEGIN, only while the owner still has more than the margin left.
def _begin(*, limited: bool) -> Statement:
    """L4's BEGIN; a limited job's (SPEC §14) also clears the limit its run waited for.

    Never for a run of a paused queue (W6): a pause stops the drive in progress
    in the statement that would begin the pass, so no pass of it begins once
    the pause has committed -- whatever the drive read before, and whatever
    it claimed ahead.
    """
    cleared = {"throttled_by": ""} if limited else {}
    return Statement(
        {"run_id": KEY, "owner": KEY, "margin": DurationField()},
        lambda runs, s: (
            fenced(s.run_id, s.owner, runs).unpaused().lease_ends_after(plus(s.now, s.margin)),
            {"lease_began_at": s.now, "admission_misses": None, **cleared, "updated_at": s.now},
        ),
    )


BEGIN = _begin(limited=False)
BEGIN_LIMITED = _begin(limited=True)


@conflicts_retried
def claim(run_id: str, owner: str, lease: timedelta, holder: str, *, takeover: bool) -> bool:
    """Take run *run_id* for one pass under *owner* (L2).

    Wins only while the run is ``running`` and due by the database's clock; the
    same statement writes the lease (``next_attempt_at`` = now + *lease*), which
    takes the run out of the due read for everyone else.

    With ``takeover=True`` the claim is for a run whose previous lease had
    *begun* (a pass that started and never reported, L3): it charges that pass
    one attempt with failure ``lease_expired``. With ``takeover=False`` it
    matches only a lease that never began, which costs nothing. The drive picks
    the form from its snapshot; a run that changed form since simply loses this
    claim and is the next drive's.

    Returns
    -------
    bool
        ``True`` if this caller now holds the run; ``False`` if it was not due,
        not running, or in the other form (someone else has it).
    """
    values = {"run_id": run_id, "owner": owner, "lease": lease, "holder": holder}
    return bool(CLAIM[takeover].run(alias(), **values))


@conflicts_retried
def claim_and_read(
    run_id: str, owner: str, lease: timedelta, holder: str, *, takeover: bool
) -> Run | None:
    """:func:`claim` the run and read it back: one statement where the backend returns rows.

    Returns the claimed run, or ``None`` when the claim was lost. Raises
    :class:`UnreadableRow` when the run was claimed but cannot be read back
    (R9, §12), with what the pass needs to fail it. A connection lost on the
    way may have applied the claim: it is noted, to be given back (F3).
    """
    with unanswered_if_lost(Unanswered(run_id, owner, took_over=takeover)):
        return _claim_and_read(run_id, owner, lease, holder, takeover=takeover)


def _claim_and_read(
    run_id: str, owner: str, lease: timedelta, holder: str, *, takeover: bool
) -> Run | None:
    using = alias()
    if not returns_rows(using):
        won = claim(run_id, owner, lease, holder, takeover=takeover)
        return read_claimed(run_id, owner) if won else None
    values = {"run_id": run_id, "owner": owner, "lease": lease, "holder": holder}
    try:
        return CLAIM[takeover].fetch(using, **values)
    except READ_ERRORS as exc:
        reason = why_unreadable(exc, using)
    return _unreadable(fenced(run_id, owner), run_id, reason)


def read_claimed(run_id: str, owner: str) -> Run | None:
    """Read back the run *owner* just claimed, where the claim could not return it (MariaDB).

    ``None`` when the claim was lost in between. Raises :class:`UnreadableRow`
    when the row cannot be read back (SQLite: a column that is not UTF-8, an
    impossible date), carrying what the pass needs to fail it as a malformed
    row (R9, §12).
    """
    claimed = fenced(run_id, owner)
    try:
        return claimed.get()
    except Run.DoesNotExist:
        return None
    except READ_ERRORS as exc:
        reason = why_unreadable(exc, alias())
    return _unreadable(claimed, run_id, reason)


def _unreadable(claimed: RunQuerySet[Run], run_id: str, reason: str) -> Run | None:
    """``None`` if the claim is no longer held; else raise :class:`UnreadableRow`."""
    # Only columns every row can hold: its identity and its counts.
    known = claimed.values_list("job", "attempts", "admission_misses").first()
    if known is None:
        return None
    job, attempts, misses = known
    raise UnreadableRow(Run(pk=run_id, job=job, attempts=attempts, admission_misses=misses), reason)


@conflicts_retried
def begin(run_id: str, owner: str, margin: timedelta) -> bool:
    """Begin the claimed pass: the commitment point (L4).

    Holds only while *owner* still has the lease with more than *margin* of it
    left by the database's clock. The caller invokes the handler if and only if
    this returns ``True``, and does not second-guess it afterwards. A
    connection lost on the way may have applied it: noted, to be given back
    uncharged, as the handler is not called (F3).
    """
    with unanswered_if_lost(Unanswered(run_id, owner)):
        return bool(BEGIN.run(alias(), run_id=run_id, owner=owner, margin=margin))


@conflicts_retried
def let_go(run_id: str, owner: str) -> bool:
    """Release *owner*'s claim, never begun, of a run whose queue was paused (W6).

    Due again at once and charged nothing -- not an attempt, not an admission
    miss (L5): nothing ran, and nothing was refused for want of time. The
    paused queue keeps it out of every drive until it is resumed.
    ``False`` when the claim is no longer held.
    """
    at = now()
    return bool(
        fenced(run_id, owner).unbegun().update(lease_owner=None, next_attempt_at=at, updated_at=at)
    )


def claimed_elsewhere(run_id: str, holder: str) -> bool:
    """Whether run *run_id*'s last claim was made by a process other than *holder* (O2).

    Asked after a claim was lost, to tell a claim another worker process won
    from one this process's own drive made stale -- a run its other threads
    throttled, deferred or claimed since the snapshot was read. Read where
    the writes go (§12); a run gone or never claimed was not won elsewhere.
    """
    last = runs().filter(pk=run_id).values_list("lease_holder", flat=True).first()
    return bool(last) and last != holder


@dataclass(frozen=True)
class AdmissionMiss:
    """What :func:`miss` did: the run's new consecutive miss count, and whether it failed.

    Not :class:`~django_leasejobs.models.Missed`, a schedule's missed due time (S3).
    """

    misses: int
    failed: bool


@conflicts_retried
def miss(run_id: str, owner: str, note: str) -> AdmissionMiss | None:
    """Release a claim that did not begin (L5), in one transaction.

    Adds one to ``admission_misses`` *as found in the row* (never a count read
    earlier), then backs the run off by :data:`~django_leasejobs.leases.ADMISSION`,
    or once that policy is spent fails it with ``lease_too_short`` and *note*.
    No attempt is charged: nothing ran.

    Returns ``None`` when *owner* no longer holds an unbegun claim.
    """
    at = now()
    with transaction.atomic(using=alias()):
        released = (
            fenced(run_id, owner)
            .unbegun()
            .update(
                admission_misses=Coalesce("admission_misses", 0) + 1,
                lease_owner=None,
                updated_at=at,
            )
        )
        if not released:
            return None
        # The row is ours until this transaction ends: the lease is released
        # but next_attempt_at still holds its expiry, so nobody can claim it.
        row = runs().filter(pk=run_id)
        misses: int = row.values_list("admission_misses", flat=True).get() or 1
        unleased = row.filter(admission_misses=misses).unleased()
        if ADMISSION.exhausted(misses):
            unleased.update(
                failure_code=FailureCode.LEASE_TOO_SHORT,
                last_error=note,
                **finished(RunStatus.FAILED, at),
            )
            return AdmissionMiss(misses, failed=True)
        unleased.update(next_attempt_at=plus(at, ADMISSION.delay(misses)))
        return AdmissionMiss(misses, failed=False)


@conflicts_retried
def release_dead_holder(run_id: str, owner: str, holder: str) -> bool:
    """Make a leased run due now because its holder process is provably gone (L9).

    Only the expiry moves: the owner and ``lease_began_at`` stay, so the
    takeover that follows charges (or holds) a begun pass exactly as it would
    have after the expiry. ``False`` when the lease changed hands or ended.
    """
    at = now()
    return bool(
        fenced(run_id, owner)
        .claimed_by_process(holder)
        .lease_ends_after(at)
        .update(next_attempt_at=at, updated_at=at)
    )
