"""The one writer of run status and lease columns.

Every transition is a single ``QuerySet.update()`` (or one short transaction
of them) whose ``WHERE`` clause is the compare and whose row count is the
answer: 1 = this caller won, 0 = someone else did. No read-then-write, no
``select_for_update``, so the protocol holds on SQLite as on PostgreSQL and
MariaDB.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, router, transaction

from .clock import get_clock
from .codec import encode
from .exceptions import LeaseJobsError
from .ids import new_id
from .models import INSTANCE_LENGTH, Run
from .querysets import live_key
from .registry import Job, get_job
from .states import RunStatus

__all__ = ["StartResult", "start"]

#: How often start() goes round "insert lost, yet no live run found": each
#: round means a live run finished between our insert and our read, which a
#: busy key can do a few times in a row but never indefinitely.
_START_ROUNDS = 10


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
    using = router.db_for_write(Run)
    runs = Run.objects.using(using)
    now = get_clock().now_expr()

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
