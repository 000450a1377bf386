"""What operators do to runs and schedules: the admin's actions, usable from code (SPEC §3, A3-A5).

Each verb is a compare-and-set, so of two operators acting at once one wins
and the other is told it was so "already". Runs are written through
:mod:`.store` (the one writer of their status); schedules through
:mod:`.schedules.writes`, and fired by :mod:`.schedules`. Every verb logs who acted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction

from . import store
from .clock import get_clock
from .codec import storable_text
from .conf import conf
from .errors import READ_ERRORS, why_unreadable
from .exceptions import InvalidNote, RetryRefused, RunNowRefused
from .models import ACTOR_LENGTH, NOTE_LENGTH, Run, Schedule
from .registry import Job, get_job
from .routing import queue_problem
from .schedules import act, plan
from .schedules import writes as schedule_writes
from .schedules.base import schedule_db
from .states import MissedCause, RunNowRefusal, RunOrigin, RunStatus
from .store import StartResult
from .tasks.finished import cancelled as task_cancelled
from .times import iso, moment

__all__ = [
    "NOTE_MAX",
    "PauseResult",
    "cancel",
    "pause",
    "pause_queue",
    "release",
    "resume",
    "resume_queue",
    "retry",
    "run_now",
]

logger = logging.getLogger("django_leasejobs")

#: Pause notes are short: they are read in a list (S4).
NOTE_MAX = NOTE_LENGTH


# -- runs ----------------------------------------------------------------------------------


def cancel(run_id: str, by: str | None = None) -> bool:
    """Cancel a live run: status ``cancelled``, failure ``cancelled``.

    A pass in flight finds its next write refused (L6) and stops as
    ``superseded``. Until it has stopped -- or its lease has expired, if its
    worker died -- the run keeps its coalescing key, so no second pass of the
    same (job, instance) can start beside it; a :func:`~django_leasejobs.start`
    meanwhile joins, and its run follows once the pass has stopped. Any row
    holding a key is accepted (a stranded row too, SPEC §11).

    Returns ``False`` when the run had already finished.
    """
    done = store.cancel_run(run_id, storable_text(f"cancelled by {by}" if by else "cancelled"))
    if done:
        logger.info("Run cancelled id=%s by=%s", run_id, by or "-")
        task_cancelled(run_id)  # a Django task's final outcome: task_finished (SPEC §9)
    return done


def retry(run_id: str, by: str | None = None) -> StartResult:
    """Start a failed or cancelled run again, as a NEW run with its job, instance and payload.

    If the (job, instance) has a live run by now, that run is joined (R1).

    Raises
    ------
    RetryRefused
        The run is live or done, or its row or payload cannot be read.
    Run.DoesNotExist
        There is no such run.
    JobNotRegistered
        Its job is not registered in this process.
    """
    try:
        run = Run.objects.using(store.alias()).get(pk=run_id)
    except Run.DoesNotExist:
        raise
    except READ_ERRORS as exc:
        reason = why_unreadable(exc, store.alias())
        raise RetryRefused(f"run {run_id} cannot be read: {reason}") from None
    if run.status not in (RunStatus.FAILED, RunStatus.CANCELLED):
        raise RetryRefused(
            f"run {run_id} is {run.status}; only failed or cancelled runs are retried"
        )
    payload = run.decoded_payload()
    if not payload.ok:
        raise RetryRefused(f"run {run_id}'s payload does not parse ({payload.error})")
    logger.info("Run retried id=%s by=%s", run_id, by or "-")
    return store.start_as(
        RunOrigin.RETRY,
        get_job(run.job),
        payload.value,
        instance=run.instance,
        queue=run.queue,
        priority=run.priority,
    )


def release(run_id: str, *, resume: bool = True, by: str | None = None, note: str = "") -> bool:
    """Decide a held run (L3, A4): resume it (running, due now) or fail it.

    A failed run's ``last_error`` says who failed it, and *note* -- the
    operator's reason, at most 200 characters, optional -- after it:
    ``interrupted; failed by alice: card 102 charged, refunded by hand``. A
    resume ignores *note*. A longer note is refused with
    :class:`~django_leasejobs.exceptions.InvalidNote` before anything changes.

    Returns ``False`` when the run is not held (already released or finished).
    """
    if not isinstance(note, str) or len(note) > NOTE_MAX:
        raise InvalidNote(f"a release note is a str of at most {NOTE_MAX} characters")
    who = by or "an operator"
    reason = note.strip()
    failed = f"interrupted; failed by {who}" + (f": {reason}" if reason else "")
    done = store.release_held(run_id, resume=resume, note=storable_text(failed))
    if done:
        logger.info("Held run released id=%s resume=%s by=%s", run_id, resume, by or "-")
    return done


# -- schedules (S4, S5) ----------------------------------------------------------------------


@dataclass(frozen=True)
class PauseResult:
    """What pause() or resume() did: ``done`` False means it was so "already"."""

    done: bool
    schedule: Schedule
    missed: int = 0


def _schedule(job: str | Job) -> Schedule:
    name = job.name if isinstance(job, Job) else job
    return Schedule.objects.using(schedule_db()).get(job=name)


def pause(job: str | Job, by: str, note: str = "") -> PauseResult:
    """Pause a schedule (S4): no due time fires until :func:`resume`.

    A compare-and-set: of two pauses, the second answers ``done=False``
    ("already paused"). *note* (at most 200 characters) says why; a longer
    one is refused with :class:`~django_leasejobs.exceptions.InvalidNote`.
    """
    if len(note) > NOTE_MAX:
        raise InvalidNote(f"a pause note is at most {NOTE_MAX} characters")
    row = _schedule(job)
    now = get_clock().now(schedule_db())
    done = schedule_writes.pause(row, now, by, storable_text(note))
    row.refresh_from_db()
    if done:
        logger.info("Schedule paused job=%s by=%s", row.job, by)
    return PauseResult(bool(done), row)


def resume(job: str | Job, by: str) -> PauseResult:
    """Resume a paused schedule (S4), applying its rule to what the pause missed.

    Due times that passed while paused are recorded with cause ``paused`` and
    handled by the job's rule (S3): ``skip`` runs nothing, ``catch_up_once``
    one run now, ``required`` every one of them. A second resume answers
    ``done=False``. A job this process does not register is refused
    (``JobNotRegistered``) before anything changes: it could not fire here.
    """
    row = _schedule(job)
    get_job(row.job)
    now = get_clock().now(schedule_db())
    with transaction.atomic(using=schedule_db()):
        done = schedule_writes.resume(row, now)
        missed = 0
        if done and row.next_due_at is not None and row.next_due_at <= now and row.enabled:
            row.last_paused_at, row.resumed_at, row.paused_at = row.paused_at, now, None
            window = plan(row, now, MissedCause.PAUSED)
            if act(row, window, now):
                missed = len(window.missed) + window.dropped
    row.refresh_from_db()
    if done:
        logger.info("Schedule resumed job=%s by=%s missed=%s", row.job, by, missed)
    return PauseResult(bool(done), row, missed)


def run_now(job: str | Job, by: str) -> StartResult:
    """Start a run by hand, outside the schedule (S5).

    Refused (:class:`~django_leasejobs.exceptions.RunNowRefused`) for a job
    that is not safe to repeat, for a job with a live run, and past
    ``HAND_RUNS_PER_HOUR`` hand runs in the last hour -- with the time a
    place frees up.
    """
    spec = get_job(job)
    if not spec.safe_to_repeat:
        raise RunNowRefused(
            RunNowRefusal.NOT_SAFE, f"{spec.name} is not safe to repeat: run it from its schedule"
        )
    now = get_clock().now(schedule_db())
    runs = Run.objects.using(store.alias()).filter(job=spec.name)
    if runs.live().exists():
        raise RunNowRefused(RunNowRefusal.LIVE, f"{spec.name} already has a live run")
    recent = list(
        runs.filter(origin=RunOrigin.HAND, started_at__gt=now - timedelta(hours=1))
        .order_by("started_at")
        .values_list("started_at", flat=True)[: conf.HAND_RUNS_PER_HOUR]
    )
    if len(recent) >= conf.HAND_RUNS_PER_HOUR:
        frees = recent[0] + timedelta(hours=1)
        raise RunNowRefused(
            RunNowRefusal.CAP,
            f"{conf.HAND_RUNS_PER_HOUR} hand runs of {spec.name} in the last hour; "
            f"the next is possible at {moment(frees)}",
            retry_at=frees,
        )
    result = store.start_as(RunOrigin.HAND, spec, {"by_hand": by, "at": iso(now, zulu=True)})
    if result.joined:  # a run went live between the check and the start
        raise RunNowRefused(RunNowRefusal.LIVE, f"{spec.name} already has a live run")
    logger.info("Run started by hand job=%s by=%s run=%s", spec.name, by, result.run.pk)
    return result


# -- queues (W6) ---------------------------------------------------------------------------


def pause_queue(queue: str, by: str, note: str = "") -> bool:
    """Pause *queue* (W6): no worker begins a pass of its runs until :func:`resume_queue`.

    Its runs are stepped over by every drive -- not counted against its
    ``limit``, never failed, no attempt charged -- and ``start()`` still
    accepts runs on it; passes in flight finish. A drive in progress stops
    too: BEGIN refuses a pass of a paused queue, so none begins once this
    has returned, and its runs the drive had claimed ahead are given back,
    uncharged. A compare-and-set: of two pauses, the second answers
    ``False`` ("already paused").

    Raises
    ------
    ValueError
        *queue* is not a queue name (1-100 characters, §2), naming the argument.
    InvalidNote
        *note* is longer than 200 characters.
    """
    if problem := queue_problem("queue", queue):
        raise ValueError(problem)
    if not isinstance(note, str) or len(note) > NOTE_MAX:
        raise InvalidNote(f"a pause note is a str of at most {NOTE_MAX} characters")
    done = store.pause_queue(queue, storable_text(str(by))[:ACTOR_LENGTH], storable_text(note))
    if done:
        logger.info("Queue paused queue=%s by=%s", queue, by)
    return done


def resume_queue(queue: str, by: str) -> bool:
    """Resume a paused *queue* (W6): its due runs are driven again at the next drive.

    ``False`` when it was not paused. Raises ``ValueError`` for a *queue*
    that is not a queue name.
    """
    if problem := queue_problem("queue", queue):
        raise ValueError(problem)
    done = store.resume_queue(queue)
    if done:
        logger.info("Queue resumed queue=%s by=%s", queue, by)
    return done
