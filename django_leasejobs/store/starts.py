"""Starting runs: ``start()`` and the run-creating it shares with every origin (SPEC R1, R2)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction

from django_leasejobs.codec import encode, storable_text
from django_leasejobs.exceptions import InvalidKey, LeaseJobsError
from django_leasejobs.ids import new_id
from django_leasejobs.models import INSTANCE_LENGTH, Run
from django_leasejobs.querysets import live_key
from django_leasejobs.registry import Job, get_job
from django_leasejobs.states import LIVE_STATUSES, RunOrigin, RunStatus

from .base import alias, conflicts_retried, create, runs
from .cancels import free_expired_cancel

__all__ = ["StartResult", "check_key", "start", "start_as"]

logger = logging.getLogger("django_leasejobs")

#: How often start() goes round "insert lost, yet no live run found": each
#: round means a live run finished between our insert and our read, which a
#: busy key can do a few times in a row but never indefinitely.
START_ROUNDS = 10


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
    InvalidKey
        *instance* is not a non-empty str of at most 200 storable characters
        (a ``ValueError``); nothing is written.
    """
    return start_as(RunOrigin.API, job, payload, instance=instance, again=again)


@conflicts_retried
def start_as(
    origin: RunOrigin,
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
    using = alias()
    conflict: IntegrityError | None = None
    for _ in range(START_ROUNDS):
        run_id = new_id()
        try:
            # The unique live_key decides, inside the database, which of any
            # number of concurrent callers inserts; the others land here.
            with transaction.atomic(using=using):
                create(run_id, job=spec.name, instance=instance, payload=text, origin=origin)
        except IntegrityError as exc:
            conflict = exc
            joined = _join(key, text, again=again)
            if joined is not None:
                return StartResult(joined, joined=True)
            continue  # The live run finished meanwhile: insert again.
        return StartResult(runs().get(pk=run_id), joined=False)
    raise LeaseJobsError(
        f"could not start or join a run of {spec.name!r} [{instance}]: "
        f"the insert kept conflicting and no live run was found"
    ) from conflict


def _join(key: str, payload: str, *, again: bool) -> Run | None:
    """Join the run holding *key*, kicking it when asked; ``None`` if none holds it now."""
    live = runs().filter(live_key=key).first()
    if live is None:
        return None
    if live.status == RunStatus.CANCELLED:
        if free_expired_cancel(live.pk):
            return None  # Its pass died with the lease: the key is free now.
        again = True  # Its pass is still stopping: this start follows it.
    elif live.status not in LIVE_STATUSES:
        logger.warning(
            "Start joined a stranded run id=%s status=%r: it holds the key of %s but is not "
            "live (cancel it to free the key)",
            live.pk,
            live.status,
            key,
        )
    if again:
        # By primary key, as a commit locks the row: one lock order, so a kick
        # and a finishing commit never deadlock (MariaDB, §12).
        if (
            not runs()
            .filter(pk=live.pk, live_key=key)
            .update(rerun_requested=True, rerun_payload=payload)
        ):
            return None  # It finished between our read and the kick.
        live.rerun_requested, live.rerun_payload = True, payload
    return live


def check_key(name: str, value: object, longest: int) -> None:
    """Refuse a key (an instance, a step name) no backend can store and compare."""
    if not isinstance(value, str) or not 0 < len(value) <= longest:
        raise InvalidKey(name, value, f"must be a non-empty str of at most {longest} characters")
    if "\x00" in value or storable_text(value) != value:
        raise InvalidKey(
            name, value, "holds a NUL or a lone surrogate, which a database cannot store"
        )
