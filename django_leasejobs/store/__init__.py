"""The one writer of run status and lease columns.

Every transition is a single ``QuerySet.update()`` (or one short transaction
of them) whose ``WHERE`` clause is the compare and whose row count is the
answer: 1 = this caller won, 0 = someone else did. No read-then-write, no
``select_for_update``, so the protocol holds on SQLite as on PostgreSQL and
MariaDB. (Retention's prune of idle flow-control slots is the one exception:
see :func:`.limits.prune_idle`.) Every time in a guard is the database's (:mod:`..clock`, L1), and
every write a pass makes after it began is fenced by
``RunQuerySet.owned_by(owner)`` (L6).

The verbs, in the order a run meets them:

* :mod:`.starts` -- :func:`start_as` (a run of a job already found, for each
  origin: ``django_leasejobs.start()`` finds it); :mod:`.batches` -- :func:`start_many`;
* :mod:`.claims` -- :func:`claim_and_read` (:func:`claim` and the read-back, one
  statement where the backend returns rows), :func:`begin`, or :func:`miss`
  -- or :func:`let_go`, a claim of a queue paused since the drive read it (W6);
  :func:`release_dead_holder` (L9); :mod:`.limits` -- :func:`begin_limited`,
  BEGIN with a limited job's slot and rate token, or :func:`throttle` (§14);
* :mod:`.renewals` -- :func:`record_step` / :func:`renew` while the pass
  runs; then one outcome: :mod:`.commits` -- :func:`commit`, or
  :func:`commit_and_begin`, a finish that carries the BEGIN of the next run
  claimed ahead (§13), or :func:`commit_and_go_on`, an advance that claims
  and begins the same run's next pass (where :func:`goes_on`); or
  :mod:`.setbacks` -- :func:`settle`, :func:`defer` or :func:`hold`;
* :mod:`.cancels` -- what the operators' verbs (:mod:`..operators`) write;
  :mod:`.deletes` -- what an operator's delete writes: runs that hold no key (A7);
  :mod:`.queues` -- a queue paused or resumed (W6); :mod:`.stats` -- a flush
  of pass statistics (O1).

The statements a pass or a drive sends every time are still written as the
``QuerySet.update()`` they stand for, and compiled once by :mod:`.sql`: the
one sub-package that reaches into Django's SQL compiler (§13).
"""

from __future__ import annotations

from django_leasejobs.leases import ADMISSION, TAKEOVER_NOTE

from .base import alias
from .batches import start_many
from .cancels import (
    cancel_run,
    free_expired_cancel,
    release_expired_cancels,
    release_held,
    stop_cancelled,
)
from .claims import (
    AdmissionMiss,
    begin,
    claim,
    claim_and_read,
    claimed_elsewhere,
    let_go,
    miss,
    read_claimed,
    release_dead_holder,
)
from .commits import Written, commit
from .deletes import delete_finished, free_of_key, with_live_key
from .held_back import space_unclaimed, throttle_unclaimed
from .limits import Admission, begin_limited, rejudge, throttle
from .next_begin import NextBegin, commit_and_begin
from .next_pass import NextPass, commit_and_go_on, goes_on
from .queues import is_paused, pause_queue, paused_queues, resume_queue
from .renewals import record_step, renew
from .setbacks import defer, hold, settle
from .starts import StartResult, check_key, start_as

__all__ = [
    "ADMISSION",
    "TAKEOVER_NOTE",
    "Admission",
    "AdmissionMiss",
    "NextBegin",
    "NextPass",
    "StartResult",
    "Written",
    "alias",
    "begin",
    "begin_limited",
    "cancel_run",
    "check_key",
    "claim",
    "claim_and_read",
    "claimed_elsewhere",
    "commit",
    "commit_and_begin",
    "commit_and_go_on",
    "defer",
    "delete_finished",
    "free_expired_cancel",
    "free_of_key",
    "goes_on",
    "hold",
    "is_paused",
    "let_go",
    "miss",
    "pause_queue",
    "paused_queues",
    "read_claimed",
    "record_step",
    "rejudge",
    "release_dead_holder",
    "release_expired_cancels",
    "release_held",
    "renew",
    "resume_queue",
    "settle",
    "space_unclaimed",
    "start_as",
    "start_many",
    "stop_cancelled",
    "throttle",
    "throttle_unclaimed",
    "with_live_key",
]
