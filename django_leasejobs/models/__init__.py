"""The app's tables (SPEC §2, §7, §9, §14): runs and their step ledger,
schedules and the missed ledger, Django tasks' attempts, flow control's state,
pass statistics and paused queues (§16, W6).
Only :mod:`django_leasejobs.store` writes a run's status or lease columns;
these classes describe the tables and decode what they hold.
"""

from __future__ import annotations

from .attempts import WORKER_ID_LENGTH, TaskAttempt
from .limits import RateState, Slot
from .observability import PassStat, PassStatHalfHour, PausedQueue
from .runs import INSTANCE_LENGTH, JOB_NAME_LENGTH, Run
from .schedules import ACTOR_LENGTH, NOTE_LENGTH, Missed, Schedule
from .steps import STEP_NAME_LENGTH, Step

__all__ = [
    "ACTOR_LENGTH",
    "INSTANCE_LENGTH",
    "JOB_NAME_LENGTH",
    "NOTE_LENGTH",
    "STEP_NAME_LENGTH",
    "WORKER_ID_LENGTH",
    "Missed",
    "PassStat",
    "PassStatHalfHour",
    "PausedQueue",
    "RateState",
    "Run",
    "Schedule",
    "Slot",
    "Step",
    "TaskAttempt",
]
