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

import functools
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ParamSpec, TypeVar

from django.db import DatabaseError, IntegrityError, connections, router, transaction
from django.db.models import Case, F, Q, When
from django.db.models.functions import Coalesce

from .clock import get_clock, plus
from .codec import encode, storable_text
from .errors import connection_lost, is_conflict, unreadable_reason
from .exceptions import LeaseJobsError, RetryRefused, UnreadableRow
from .ids import new_id
from .models import INSTANCE_LENGTH, Run, Step
from .querysets import RunQuerySet, live_key
from .registry import Job, get_job
from .states import LIVE_STATUSES, FailureCode, RunOrigin, RunStatus

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
    "start_as",
    "stop_cancelled",
    "stranded",
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


#: How often a write that lost a deadlock or serialization race is tried (SPEC §12).
CONFLICT_ATTEMPTS = 4

P = ParamSpec("P")
R = TypeVar("R")


def alias() -> str:
    """The database alias every run write goes to."""
    return router.db_for_write(Run)


_using = alias


def _conflicts_retried(verb: Callable[P, R]) -> Callable[P, R]:
    """Run *verb* again when it loses a deadlock or serialization race (SPEC §12).

    Only when it runs on its own: inside a caller's transaction, MariaDB has
    already rolled the whole transaction back and PostgreSQL refuses any
    further statement in it, so the error goes to the caller, whose
    transaction it is to retry.
    """

    @functools.wraps(verb)
    def retried(*args: P.args, **kwargs: P.kwargs) -> R:
        using = _using()
        own = not connections[using].in_atomic_block
        for attempt in range(1, CONFLICT_ATTEMPTS + 1):
            try:
                return verb(*args, **kwargs)
            except DatabaseError as exc:
                if not (own and attempt < CONFLICT_ATTEMPTS and is_conflict(exc)):
                    raise
                logger.info("Write %s lost a race (attempt %s); again", verb.__name__, attempt)
                time.sleep(random.uniform(0.001, 0.01 * attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    return retried


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
        as it stands (its cursor, counters and start time unchanged). A run
        cancelled while its pass is still in flight keeps its key until that
        pass stops (SPEC §3 ``cancel``): a start meanwhile joins it as a kick,
        and its follow-up starts once the pass has stopped.

    Raises
    ------
    JobNotRegistered
        *job* is not registered in this process; nothing is written.
    NotQueueSafe
        The payload holds something JSON would not return unchanged; the
        error names its path and nothing is written.
    ValueError
        *instance* is not a non-empty str of at most 200 storable characters.
    """
    return start_as(RunOrigin.API, job, payload, instance=instance, again=again)


@_conflicts_retried
def start_as(
    origin: str,
    job: str | Job,
    payload: Any = None,
    *,
    instance: str = "default",
    again: bool = False,
) -> StartResult:
    """:func:`start`, recording how the run began (``origin``, SPEC §2)."""
    spec = get_job(job)
    check_key("instance", instance, INSTANCE_LENGTH)
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
                _create(
                    runs,
                    run_id,
                    job=spec.name,
                    instance=instance,
                    payload=text,
                    origin=origin,
                    now=now,
                )
        except IntegrityError as exc:
            conflict = exc
            live = runs.filter(live_key=key).first()
            if live is None:
                continue  # The live run finished between our insert and our read.
            if live.status == RunStatus.CANCELLED:
                if _free_expired_cancel(using, live):
                    continue  # Its pass died with the lease: the key is free now.
                again = True  # Its pass is still stopping: this start follows it.
            elif live.status not in LIVE_STATUSES:
                logger.warning(
                    "Start joined a stranded run id=%s status=%r: it holds the key of "
                    "%s but is not live (cancel it to free the key)",
                    live.pk,
                    live.status,
                    key,
                )
            if again:
                # By primary key, as a commit locks the row: one lock order, so
                # a kick and a finishing commit never deadlock (MariaDB, §12).
                if not runs.filter(pk=live.pk, live_key=key).update(
                    rerun_requested=True, rerun_payload=text
                ):
                    continue  # It finished between our read and the kick.
                live.rerun_requested, live.rerun_payload = True, text
            return StartResult(live, joined=True)
        return StartResult(runs.get(pk=run_id), joined=False)
    raise LeaseJobsError(
        f"could not start or join a run of {spec.name!r} [{instance}]: "
        f"the insert kept conflicting and no live run was found"
    ) from conflict


def check_key(name: str, value: object, longest: int) -> None:
    """Refuse a key (an instance, a step name) no backend can store and compare."""
    if not isinstance(value, str) or not 0 < len(value) <= longest:
        raise ValueError(
            f"{name} must be a non-empty str of at most {longest} characters, got {value!r}"
        )
    if "\x00" in value or storable_text(value) != value:
        raise ValueError(
            f"{name} {value!r} holds a NUL or a lone surrogate, which a database cannot store"
        )


def _create(
    runs: RunQuerySet, run_id: str, *, job: str, instance: str, payload: str, origin: str, now: Any
) -> Run:
    """Insert a new live run, due now: for start() and for a kick's follow-up alike."""
    return runs.create(
        id=run_id,
        job=job,
        instance=instance,
        origin=origin,
        payload=payload,
        status=RunStatus.RUNNING,
        started_at=now,
        updated_at=now,
        next_attempt_at=now,
        live_key=live_key(job, instance),
    )


def _insert_follow_up(using: str, previous: Run) -> None:
    """Start the kicked follow-up of *previous* inside the transaction that frees its key."""
    payload = Run.objects.using(using).values_list("rerun_payload", flat=True).get(pk=previous.pk)
    _create(
        Run.objects.using(using),
        new_id(),
        job=previous.job,
        instance=previous.instance,
        payload=payload or "null",
        origin=RunOrigin.FOLLOW_UP,
        now=_now(),
    )


# -- claim and begin (L2-L5) ---------------------------------------------------


@_conflicts_retried
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

    Raises :class:`UnreadableRow` when the row cannot be read back (SQLite:
    a column that is not UTF-8, an impossible date), carrying what the pass
    needs to fail it as a malformed row (R9, §12).
    """
    runs = _runs().filter(pk=run_id, lease_owner=owner, status=RunStatus.RUNNING)
    try:
        return runs.get()
    except Run.DoesNotExist:
        return None
    except (DatabaseError, ValueError, TypeError, OverflowError) as exc:
        if isinstance(exc, DatabaseError) and connection_lost(_using()):
            raise
        reason = unreadable_reason(exc)
    # Only columns every row can hold: its identity and its counts.
    known = runs.values_list("job", "attempts", "admission_misses").first()
    if known is None:
        return None
    job, attempts, misses = known
    raise UnreadableRow(Run(pk=run_id, job=job, attempts=attempts, admission_misses=misses), reason)


@_conflicts_retried
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


@_conflicts_retried
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


@_conflicts_retried
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


@_conflicts_retried
def renew(run_id: str, owner: str, lease: timedelta) -> bool:
    """Extend *owner*'s lease to now + *lease* (L7); ``False`` = the lease is lost."""
    now = _now()
    return bool(
        _runs()
        .filter(pk=run_id, status=RunStatus.RUNNING, lease_owner=owner)
        .update(next_attempt_at=plus(now, lease), updated_at=now)
    )


@_conflicts_retried
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


@_conflicts_retried
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
            _insert_follow_up(using, run)
    return bool(won)


@_conflicts_retried
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


@_conflicts_retried
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


@_conflicts_retried
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


@_conflicts_retried
def cancel(run_id: str, by: str | None = None) -> bool:
    """Cancel a live run: status ``cancelled``, failure ``cancelled``.

    A pass in flight finds its next write refused (L6) and stops as
    ``superseded``. Until it has stopped -- or its lease has expired, if its
    worker died -- the run keeps its coalescing key, so no second pass of the
    same (job, instance) can start beside it; a :func:`start` meanwhile joins
    and its run follows once the pass has stopped. Any row holding a key is
    accepted (a stranded row too, SPEC §11).

    Returns ``False`` when the run had already finished.
    """
    now = _now()
    # A begun, unexpired lease: a pass may be running right now.
    in_flight = Q(lease_began_at__isnull=False, next_attempt_at__gt=now)

    def kept(column: str) -> Case:
        return Case(When(in_flight, then=F(column)), default=None)

    cancellable = Q(status__in=LIVE_STATUSES) | (
        Q(live_key__isnull=False) & ~Q(status=RunStatus.CANCELLED)
    )
    done = (
        _runs()
        .filter(cancellable, pk=run_id)
        .update(
            status=RunStatus.CANCELLED,
            failure_code=FailureCode.CANCELLED,
            last_error=storable_text(f"cancelled by {by}" if by else "cancelled"),
            ended_at=now,
            updated_at=now,
            # MySQL assigns left to right: the columns the test reads go last.
            live_key=kept("live_key"),
            lease_owner=kept("lease_owner"),
            next_attempt_at=kept("next_attempt_at"),
            lease_began_at=kept("lease_began_at"),
        )
    )
    if done:
        logger.info("Run cancelled id=%s by=%s", run_id, by or "-")
    return bool(done)


#: A cancelled run whose pass has stopped: its key and lease let go (§3 ``cancel``).
_STOPPED: dict[str, Any] = {
    "live_key": None,
    "lease_owner": None,
    "next_attempt_at": None,
    "lease_began_at": None,
}


@_conflicts_retried
def stop_cancelled(run_id: str, owner: str) -> bool:
    """Free the key of a run cancelled while *owner*'s pass was in flight, now it stopped.

    In one transaction with the follow-up a start asked for meanwhile, so the
    key is never free for a moment in between. ``False`` when the run was not
    cancelled under this pass (the pass lost its lease some other way).
    """
    using = _using()
    with transaction.atomic(using=using):
        freed = (
            Run.objects.using(using)
            .filter(pk=run_id, status=RunStatus.CANCELLED, lease_owner=owner)
            .update(**_STOPPED)
        )
        if freed:
            _follow_cancelled(using, run_id)
    return bool(freed)


def _free_expired_cancel(using: str, run: Run) -> bool:
    """Free the key of cancelled *run* if the lease of its pass has expired (its worker died)."""
    with transaction.atomic(using=using):
        freed = (
            Run.objects.using(using)
            .filter(pk=run.pk, status=RunStatus.CANCELLED, next_attempt_at__lte=_now())
            .update(**_STOPPED)
        )
    return bool(freed)


def release_expired_cancels(limit: int) -> int:
    """Free the keys of cancelled runs whose pass died with its lease, starting their follow-ups.

    A range of the due index (``status = 'cancelled' AND next_attempt_at <=
    now``): only runs cancelled mid-pass keep a ``next_attempt_at``.
    Returns how many keys were freed.
    """
    using = _using()
    runs = Run.objects.using(using)
    expired = list(
        runs.filter(status=RunStatus.CANCELLED, next_attempt_at__lte=_now()).values_list(
            "pk", "lease_owner"
        )[:limit]
    )
    freed = 0
    for run_id, owner in expired:
        with transaction.atomic(using=using):
            won = runs.filter(
                pk=run_id,
                status=RunStatus.CANCELLED,
                lease_owner=owner,
                next_attempt_at__lte=_now(),
            ).update(**_STOPPED)
            if won:
                freed += 1
                _follow_cancelled(using, run_id)
    return freed


def stranded(limit: int) -> list[tuple[str, str]]:
    """Rows no drive will ever reach, left by a hand edit or a restore (SPEC §11).

    ``running`` with no ``next_attempt_at`` (never due), and rows holding a
    coalescing key while not live -- a status outside the vocabulary, say --
    which every start() of that key would join. Returns (run id, why) pairs;
    each read is a range of an index (due, live key) whose size tracks live runs.
    """
    runs = _runs()
    found = [
        (run_id, "running with no next_attempt_at: never due; cancel it or release it by hand")
        for run_id in runs.filter(
            status=RunStatus.RUNNING, next_attempt_at__isnull=True
        ).values_list("pk", flat=True)[:limit]
    ]
    keyed = (
        runs.filter(live_key__isnull=False)
        .exclude(status__in=LIVE_STATUSES)
        .exclude(status=RunStatus.CANCELLED, next_attempt_at__isnull=False)  # stopping (cancel)
        .values_list("pk", "status")[:limit]
    )
    found += [
        (run_id, f"status {status!r} holds the live key: start() joins it; cancel it")
        for run_id, status in keyed
    ]
    return found


def _follow_cancelled(using: str, run_id: str) -> None:
    run = Run.objects.using(using).only("job", "instance", "rerun_requested").get(pk=run_id)
    if run.rerun_requested:
        _insert_follow_up(using, run)


def retry(run_id: str, by: str | None = None) -> StartResult:
    """Start a failed or cancelled run again, as a NEW run with its job, instance and payload.

    If the (job, instance) has a live run by now, that run is joined (R1).
    Raises :class:`RetryRefused` if the run is live or done or its payload
    does not parse, ``Run.DoesNotExist`` if there is no such run, and
    ``JobNotRegistered`` if its job is not registered in this process.
    """
    try:
        run = _runs().get(pk=run_id)
    except Run.DoesNotExist:
        raise
    except (DatabaseError, ValueError, TypeError, OverflowError) as exc:
        if isinstance(exc, DatabaseError) and connection_lost(_using()):
            raise
        raise RetryRefused(f"run {run_id} cannot be read: {unreadable_reason(exc)}") from None
    if run.status not in (RunStatus.FAILED, RunStatus.CANCELLED):
        raise RetryRefused(
            f"run {run_id} is {run.status}; only failed or cancelled runs are retried"
        )
    payload = run.decoded_payload()
    if not payload.ok:
        raise RetryRefused(f"run {run_id}'s payload does not parse ({payload.error})")
    logger.info("Run retried id=%s by=%s", run_id, by or "-")
    return start_as(RunOrigin.RETRY, run.job, payload.value, instance=run.instance)


@_conflicts_retried
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
            last_error=storable_text(
                f"interrupted; failed by {by}" if by else "interrupted; failed by an operator"
            ),
            next_attempt_at=None,
            ended_at=now,
            live_key=None,
            updated_at=now,
        )
    if done:
        logger.info("Held run released id=%s resume=%s by=%s", run_id, resume, by or "-")
    return bool(done)
