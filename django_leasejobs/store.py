"""The one writer of run status and lease columns.

Every transition is a single ``QuerySet.update()`` (or one short transaction
of them) whose ``WHERE`` clause is the compare and whose row count is the
answer: 1 = this caller won, 0 = someone else did. No read-then-write, no
``select_for_update``, so the protocol holds on SQLite as on PostgreSQL and
MariaDB. Every time in a guard is the database's (:mod:`.clock`, L1).

The verbs, in the order a run meets them: :func:`start`, :func:`claim`,
:func:`begin` (or :func:`miss`), :func:`record_step` / :func:`renew`, then one
outcome -- :func:`commit`, :func:`settle`, :func:`defer` or :func:`hold`.
Every verb after :func:`begin` is fenced on the pass's owner token (L6) and
returns ``False`` when the pass no longer holds the run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, router, transaction
from django.db.models import F
from django.db.models.functions import Coalesce

from .clock import get_clock, plus
from .codec import encode
from .exceptions import LeaseJobsError
from .ids import new_id
from .models import INSTANCE_LENGTH, Run, Step
from .querysets import RunQuerySet, live_key
from .registry import Job, get_job
from .states import LIVE_STATUSES, FailureCode, RunStatus

__all__ = [
    "StartResult",
    "begin",
    "cancel",
    "claim",
    "commit",
    "defer",
    "hold",
    "miss",
    "read_claimed",
    "record_step",
    "release",
    "release_dead_holder",
    "renew",
    "retry",
    "settle",
    "start",
]

logger = logging.getLogger("django_leasejobs")

#: How often start() goes round "insert lost, yet no live run found": each
#: round means a live run finished between our insert and our read, which a
#: busy key can do a few times in a row but never indefinitely.
_START_ROUNDS = 10

#: L5: consecutive admission misses after which a run fails.
ADMISSION_MISS_MAX = 10
ADMISSION_BACKOFF_BASE = timedelta(seconds=1)
ADMISSION_BACKOFF_CAP = timedelta(minutes=5)

#: ``last_error`` of a run whose begun lease expired and was taken over (L3).
TAKEOVER_NOTE = (
    "the pass holding this run began and stopped reporting (worker killed or cut off); "
    "its lease expired and the run was taken over"
)


def _using() -> str:
    return router.db_for_write(Run)


def _runs() -> RunQuerySet:
    return Run.objects.using(_using())


def _now() -> Any:
    return get_clock().now_expr()


@dataclass(frozen=True)
class StartResult:
    """What :func:`start` did: the run, and whether it was already live."""

    run: Run
    joined: bool


def start(
    job: str | Job, payload: Any = None, *, instance: str = "default", again: bool = False
) -> StartResult:
    """Start a run of *job*, or join the live one (SPEC R1).

    Parameters
    ----------
    job:
        A registered job, or its name.
    payload:
        The run's input: JSON values only (R2), checked before anything is
        written.
    instance:
        What is being worked on; at most one live run per (job, instance).
    again:
        When joining, ask for one more run after the live one completes, with
        this call's payload (the "kick"). Any number of such joins collapse
        into one follow-up.

    Returns
    -------
    StartResult
        ``joined=False`` with the new run, or ``joined=True`` with the live run
        as it stands (its cursor, counters and start time unchanged).

    Raises
    ------
    JobNotRegistered
        *job* is not registered in this process; nothing is written.
    NotQueueSafe
        The payload holds something JSON would not return unchanged; the
        error names its path and nothing is written.
    """
    spec = get_job(job)
    if not isinstance(instance, str) or not 0 < len(instance) <= INSTANCE_LENGTH:
        raise ValueError(
            f"instance must be a non-empty str of at most {INSTANCE_LENGTH} characters, "
            f"got {instance!r}"
        )
    text = encode(payload, "payload")
    key = live_key(spec.name, instance)
    using = _using()
    runs = Run.objects.using(using)
    now = _now()

    conflict: IntegrityError | None = None
    for _ in range(_START_ROUNDS):
        run_id = new_id()
        try:
            # The unique live_key decides, inside the database, which of any
            # number of concurrent callers inserts; the others land here.
            with transaction.atomic(using=using):
                runs.create(
                    id=run_id,
                    job=spec.name,
                    instance=instance,
                    payload=text,
                    status=RunStatus.RUNNING,
                    started_at=now,
                    updated_at=now,
                    next_attempt_at=now,
                    live_key=key,
                )
        except IntegrityError as exc:
            conflict = exc
            if again:
                # A flag, not a counter: many kicks make one follow-up run.
                runs.filter(live_key=key).update(rerun_requested=True, rerun_payload=text)
            live = runs.filter(live_key=key).first()
            if live is not None:
                return StartResult(live, joined=True)
            # The live run finished between our insert and our read: try again.
            continue
        return StartResult(runs.get(pk=run_id), joined=False)
    raise LeaseJobsError(
        f"could not start or join a run of {spec.name!r} [{instance}]: "
        f"the insert kept conflicting and no live run was found"
    ) from conflict


def _insert_follow_up(using: str, previous: Run, payload_text: str) -> None:
    """Start the kicked follow-up of *previous* inside the committing transaction."""
    now = _now()
    Run.objects.using(using).create(
        id=new_id(),
        job=previous.job,
        instance=previous.instance,
        payload=payload_text,
        status=RunStatus.RUNNING,
        started_at=now,
        updated_at=now,
        next_attempt_at=now,
        live_key=live_key(previous.job, previous.instance),
    )


# -- claim and begin (L2-L5) ---------------------------------------------------


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
    now = _now()
    runs = _runs().filter(
        pk=run_id,
        status=RunStatus.RUNNING,
        next_attempt_at__lte=now,
        lease_began_at__isnull=not takeover,
    )
    values: dict[str, Any] = {
        "lease_owner": owner,
        "lease_holder": holder,
        "next_attempt_at": plus(now, lease),
        "updated_at": now,
    }
    if takeover:
        values |= {
            "attempts": F("attempts") + 1,
            "failure_code": FailureCode.LEASE_EXPIRED,
            "last_error": TAKEOVER_NOTE,
            "lease_began_at": None,  # last: MySQL evaluates SET clauses left to right
        }
    return bool(runs.update(**values))


def read_claimed(run_id: str, owner: str) -> Run | None:
    """Read back the run *owner* just claimed.

    Django's ``update()`` cannot return the row, so this is the one read a
    pass costs (SPEC §13). ``None`` when the claim was lost in between.
    """
    try:
        return _runs().get(pk=run_id, lease_owner=owner, status=RunStatus.RUNNING)
    except Run.DoesNotExist:
        return None


def begin(run_id: str, owner: str, margin: timedelta) -> bool:
    """Begin the claimed pass: the commitment point (L4).

    Holds only while *owner* still has the lease with more than *margin* of it
    left by the database's clock. The caller invokes the handler if and only if
    this returns ``True``, and does not second-guess it afterwards.
    """
    now = _now()
    return bool(
        _runs()
        .filter(
            pk=run_id,
            status=RunStatus.RUNNING,
            lease_owner=owner,
            next_attempt_at__gt=plus(now, margin),
        )
        .update(lease_began_at=now, admission_misses=None, updated_at=now)
    )


def admission_backoff(misses: int) -> timedelta:
    """The wait after the *misses*-th consecutive admission miss: 1 s doubling, 5 min cap."""
    seconds = ADMISSION_BACKOFF_BASE.total_seconds() * 2.0 ** min(max(0, misses - 1), 32)
    return min(ADMISSION_BACKOFF_CAP, timedelta(seconds=seconds))


@dataclass(frozen=True)
class Missed:
    """What :func:`miss` did: the run's new consecutive miss count, and whether it failed."""

    misses: int
    failed: bool


def miss(run_id: str, owner: str, note: str) -> Missed | None:
    """Release a claim that did not begin (L5), in one transaction.

    Adds one to ``admission_misses`` *as found in the row* (never a count read
    earlier), then backs the run off, or at :data:`ADMISSION_MISS_MAX` fails it
    with ``lease_too_short`` and *note*. No attempt is charged: nothing ran.

    Returns ``None`` when *owner* no longer holds an unbegun claim.
    """
    using = _using()
    runs = Run.objects.using(using)
    now = _now()
    with transaction.atomic(using=using):
        released = runs.filter(
            pk=run_id, status=RunStatus.RUNNING, lease_owner=owner, lease_began_at__isnull=True
        ).update(
            admission_misses=Coalesce("admission_misses", 0) + 1,
            lease_owner=None,
            updated_at=now,
        )
        if not released:
            return None
        # The row is ours until this transaction ends: the lease is released
        # but next_attempt_at still holds its expiry, so nobody can claim it.
        misses: int = runs.filter(pk=run_id).values_list("admission_misses", flat=True).get() or 1
        unleased = runs.filter(pk=run_id, lease_owner__isnull=True, admission_misses=misses)
        if misses >= ADMISSION_MISS_MAX:
            unleased.update(
                status=RunStatus.FAILED,
                failure_code=FailureCode.LEASE_TOO_SHORT,
                last_error=note,
                next_attempt_at=None,
                ended_at=now,
                live_key=None,
            )
            return Missed(misses, failed=True)
        unleased.update(next_attempt_at=plus(now, admission_backoff(misses)))
        return Missed(misses, failed=False)


def release_dead_holder(run_id: str, owner: str, holder: str) -> bool:
    """Make a leased run due now because its holder process is provably gone (L9).

    Only the expiry moves: the owner and ``lease_began_at`` stay, so the
    takeover that follows charges (or holds) a begun pass exactly as it would
    have after the expiry. ``False`` when the lease changed hands or ended.
    """
    now = _now()
    return bool(
        _runs()
        .filter(
            pk=run_id,
            status=RunStatus.RUNNING,
            lease_owner=owner,
            lease_holder=holder,
            next_attempt_at__gt=now,
        )
        .update(next_attempt_at=now, updated_at=now)
    )


# -- the pass's writes, fenced on its owner (L6, L7) --------------------------


def renew(run_id: str, owner: str, lease: timedelta) -> bool:
    """Extend *owner*'s lease to now + *lease* (L7); ``False`` = the lease is lost."""
    now = _now()
    return bool(
        _runs()
        .filter(pk=run_id, status=RunStatus.RUNNING, lease_owner=owner)
        .update(next_attempt_at=plus(now, lease), updated_at=now)
    )


def record_step(
    run_id: str,
    owner: str,
    lease: timedelta,
    name: str,
    *,
    result: str | None,
    attempts: int,
    error: str,
    exists: bool,
) -> bool:
    """Renew the lease and record one step attempt, in one transaction (R5, L7).

    ``result`` is the step's JSON text, or ``None`` for a failed attempt.
    *exists* says whether the ledger already has a row for *name* (the pass
    read the ledger once), so this is an UPDATE or an INSERT, never both.

    Returns ``False``, writing nothing, when *owner* lost the lease.
    """
    using = _using()
    now = _now()
    try:
        with transaction.atomic(using=using):
            renewed = (
                Run.objects.using(using)
                .filter(pk=run_id, status=RunStatus.RUNNING, lease_owner=owner)
                .update(next_attempt_at=plus(now, lease), updated_at=now, has_steps=True)
            )
            if not renewed:
                return False
            steps = Step.objects.using(using)
            values = {"result": result, "attempts": attempts, "last_error": error}
            if exists:
                steps.filter(run_id=run_id, name=name).update(recorded_at=now, **values)
            else:
                steps.create(run_id=run_id, name=name, recorded_at=now, **values)
    except IntegrityError:
        # Another pass wrote this step's row, so it held the run after us.
        return False
    return True


def _outcome(owner: str, run_id: str) -> RunQuerySet:
    return _runs().filter(pk=run_id, status=RunStatus.RUNNING, lease_owner=owner)


def commit(
    run: Run,
    owner: str,
    *,
    cursor: str | None,
    counters: str,
    done: bool,
    progress_total: int | None,
    drop_steps: bool,
) -> bool:
    """Commit a pass that returned (R3), in one transaction.

    Writes the cursor (the caller passes the old one when the handler supplied
    none), the merged counters, ``attempts = 0``, a cleared failure and a
    released lease due now (L8), and drops the pass's step ledger. Done: status
    ``done``, ``ended_at`` stamped, ``live_key`` cleared -- and if a kick asked
    for it (``rerun_requested``), the follow-up run starts in the same
    transaction, so the key is never free for a moment in between.

    Returns ``False``, writing nothing, when *owner* lost the lease.
    """
    using = _using()
    now = _now()
    values: dict[str, Any] = {
        "cursor": cursor,
        "counters": counters,
        "attempts": 0,
        "failure_code": "",
        "last_error": "",
        "lease_owner": None,
        "lease_began_at": None,
        "updated_at": now,
    }
    if progress_total is not None:
        values["progress_total"] = progress_total
    if done:
        values |= {
            "status": RunStatus.DONE,
            "next_attempt_at": None,
            "ended_at": now,
            "live_key": None,
        }
    else:
        values["next_attempt_at"] = now
    if drop_steps:
        values["has_steps"] = False
    outcome = _outcome(owner, run.pk)
    # A finish first tries the form no kick asked to follow up; most finishes
    # are that, and then nothing needs to be read back.
    quiet = outcome.filter(rerun_requested=False) if done else outcome
    if not drop_steps and quiet.update(**values):
        return True  # One statement, so no transaction: an advance, or a quiet finish.
    # Writes that must land together: the ledger goes with the commit, and a
    # kicked finish starts its follow-up before anyone else can take the key.
    with transaction.atomic(using=using):
        won = drop_steps and bool(quiet.update(**values))
        kicked = False
        if not won and done:
            won = kicked = bool(outcome.update(**values))
        if won and drop_steps:
            Step.objects.using(using).filter(run_id=run.pk).delete()
        if kicked:
            payload = (
                Run.objects.using(using).values_list("rerun_payload", flat=True).get(pk=run.pk)
            )
            _insert_follow_up(using, run, payload or "null")
    return bool(won)


def settle(
    run: Run,
    owner: str,
    *,
    attempts: int,
    failure_code: str,
    error: str,
    retry_in: timedelta | None,
) -> bool:
    """Record a failed pass (R4): nothing the handler produced is written.

    Cursor, counters and the step ledger stay as the last commit left them.
    With *retry_in* the run is due again after that backoff; without it the
    run is ``failed`` for good. Either way the lease is released (L8).

    Returns ``False``, writing nothing, when *owner* lost the lease.
    """
    now = _now()
    values: dict[str, Any] = {
        "attempts": attempts,
        "failure_code": failure_code,
        "last_error": error,
        "lease_owner": None,
        "lease_began_at": None,
        "updated_at": now,
    }
    if retry_in is None:
        values |= {
            "status": RunStatus.FAILED,
            "next_attempt_at": None,
            "ended_at": now,
            "live_key": None,
        }
    else:
        values["next_attempt_at"] = plus(now, retry_in)
    return bool(_outcome(owner, run.pk).update(**values))


def defer(run: Run, owner: str, delay: timedelta) -> bool:
    """Put the run off by *delay* without charging an attempt (R8).

    Attempts and the failure stay as they were. ``False`` = lease lost.
    """
    now = _now()
    return bool(
        _outcome(owner, run.pk).update(
            next_attempt_at=plus(now, delay),
            lease_owner=None,
            lease_began_at=None,
            updated_at=now,
        )
    )


def hold(run: Run, owner: str) -> bool:
    """Hold a run whose interrupted pass must not be replayed (L3).

    Status ``held`` with failure ``interrupted``; it keeps its live key (a
    held run is live, R1) and waits for :func:`release`. ``False`` = lease lost.
    """
    now = _now()
    return bool(
        _outcome(owner, run.pk).update(
            status=RunStatus.HELD,
            failure_code=FailureCode.INTERRUPTED,
            next_attempt_at=None,
            lease_owner=None,
            lease_began_at=None,
            updated_at=now,
        )
    )


# -- operators (SPEC §3, A3): each a compare-and-set on the run's status -------


def cancel(run_id: str, by: str | None = None) -> bool:
    """Cancel a live run: status ``cancelled``, failure ``cancelled``.

    A pass in flight finds its next write refused (L6) and stops as
    ``superseded``. Returns ``False`` when the run had already finished.
    """
    now = _now()
    done = (
        _runs()
        .filter(pk=run_id, status__in=LIVE_STATUSES)
        .update(
            status=RunStatus.CANCELLED,
            failure_code=FailureCode.CANCELLED,
            last_error=f"cancelled by {by}" if by else "cancelled",
            next_attempt_at=None,
            ended_at=now,
            live_key=None,
            lease_owner=None,
            lease_began_at=None,
            updated_at=now,
        )
    )
    if done:
        logger.info("Run cancelled id=%s by=%s", run_id, by or "-")
    return bool(done)


def retry(run_id: str, by: str | None = None) -> StartResult:
    """Start a failed or cancelled run again, as a NEW run with its job, instance and payload.

    If the (job, instance) has a live run by now, that run is joined (R1).
    Raises ``ValueError`` if the run is live or done, ``Run.DoesNotExist`` if
    there is no such run.
    """
    run = _runs().get(pk=run_id)
    if run.status not in (RunStatus.FAILED, RunStatus.CANCELLED):
        raise ValueError(f"run {run_id} is {run.status}; only failed or cancelled runs are retried")
    payload = run.decoded_payload()
    if not payload.ok:
        raise ValueError(f"run {run_id}'s payload does not parse ({payload.error})")
    logger.info("Run retried id=%s by=%s", run_id, by or "-")
    return start(run.job, payload.value, instance=run.instance)


def release(run_id: str, *, resume: bool = True, by: str | None = None) -> bool:
    """Decide a held run (L3, A4): resume it (running, due now) or fail it.

    Returns ``False`` when the run is not held (already released or finished).
    """
    now = _now()
    held = _runs().filter(pk=run_id, status=RunStatus.HELD)
    if resume:
        done = held.update(status=RunStatus.RUNNING, next_attempt_at=now, updated_at=now)
    else:
        done = held.update(
            status=RunStatus.FAILED,
            last_error=f"interrupted; failed by {by}"
            if by
            else "interrupted; failed by an operator",
            next_attempt_at=None,
            ended_at=now,
            live_key=None,
            updated_at=now,
        )
    if done:
        logger.info("Held run released id=%s resume=%s by=%s", run_id, resume, by or "-")
    return bool(done)
