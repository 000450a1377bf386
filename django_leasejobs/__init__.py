"""django-leasejobs: long, resumable, exactly-one-at-a-time jobs in your Django database.

The public API (SPEC §3), every name in :data:`__all__`. Names whose modules
touch models are imported on first use, so ``django_leasejobs`` itself can be
imported before the app registry is ready (``INSTALLED_APPS`` loads this
package first).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .exceptions import (
    Defer,
    DuplicateJob,
    InvalidJob,
    InvalidKey,
    JobNotRegistered,
    LeaseJobsError,
    NotQueueSafe,
    PassTimedOut,
    RetryRefused,
    RunNowRefused,
    StepInTransaction,
    StepReused,
)
from .limits import Limit, Rate
from .policy import Retry
from .registry import Job, get_job, job, registry
from .report import DriveReport
from .states import FailureCode, MissedRule, PassOutcome, RunOrigin, RunStatus, ScheduleState

if TYPE_CHECKING:
    from .driver import run_due_jobs
    from .operators import (
        PauseResult,
        cancel,
        pause,
        pause_queue,
        release,
        resume,
        resume_queue,
        retry,
        run_now,
    )
    from .passes import Pass, PassResult
    from .starting import start, start_many
    from .store import StartResult

__version__ = "0.1.0.dev0"

#: Public names whose modules import models, by the module that defines them.
_LAZY = {
    "run_due_jobs": ".driver",
    "Pass": ".passes",
    "PassResult": ".passes",
    "PauseResult": ".operators",
    "cancel": ".operators",
    "pause": ".operators",
    "pause_queue": ".operators",
    "release": ".operators",
    "resume": ".operators",
    "resume_queue": ".operators",
    "retry": ".operators",
    "run_now": ".operators",
    "StartResult": ".store",
    "start": ".starting",
    "start_many": ".starting",
}

__all__ = [
    "Defer",
    "DriveReport",
    "DuplicateJob",
    "FailureCode",
    "InvalidJob",
    "InvalidKey",
    "Job",
    "JobNotRegistered",
    "LeaseJobsError",
    "Limit",
    "MissedRule",
    "NotQueueSafe",
    "Pass",
    "PassOutcome",
    "PassResult",
    "PassTimedOut",
    "PauseResult",
    "Rate",
    "Retry",
    "RetryRefused",
    "RunNowRefused",
    "RunOrigin",
    "RunStatus",
    "ScheduleState",
    "StartResult",
    "StepInTransaction",
    "StepReused",
    "cancel",
    "get_job",
    "job",
    "pause",
    "pause_queue",
    "registry",
    "release",
    "resume",
    "resume_queue",
    "retry",
    "run_due_jobs",
    "run_now",
    "start",
    "start_many",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
