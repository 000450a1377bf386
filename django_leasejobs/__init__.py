"""django-leasejobs: long, resumable, exactly-one-at-a-time jobs in your Django database.

The public API (SPEC §3). Names that touch models are imported on first use,
so ``django_leasejobs`` itself can be imported before the app registry is
ready (``INSTALLED_APPS`` loads this package first).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .exceptions import (
    Defer,
    DuplicateJob,
    InvalidJob,
    JobNotRegistered,
    LeaseJobsError,
    NotQueueSafe,
)
from .policy import Retry
from .registry import Job, MissedRule, get_job, job, registry
from .states import FailureCode, RunStatus

if TYPE_CHECKING:
    from .driver import DriveReport, run_due_jobs
    from .passes import Pass, PassResult, PassTimedOut, StepReused
    from .schedules import PauseResult, RunNowRefused, pause, resume, run_now
    from .store import StartResult, cancel, release, retry, start

__version__ = "0.1.0.dev0"

__all__ = [
    "Defer",
    "DriveReport",
    "DuplicateJob",
    "FailureCode",
    "InvalidJob",
    "Job",
    "JobNotRegistered",
    "LeaseJobsError",
    "MissedRule",
    "NotQueueSafe",
    "Pass",
    "PassResult",
    "PassTimedOut",
    "PauseResult",
    "Retry",
    "RunNowRefused",
    "RunStatus",
    "StartResult",
    "StepReused",
    "cancel",
    "get_job",
    "job",
    "pause",
    "registry",
    "release",
    "resume",
    "retry",
    "run_due_jobs",
    "run_now",
    "start",
]

#: Public names whose modules import models, by the module that defines them.
_LAZY = {
    "DriveReport": ".driver",
    "run_due_jobs": ".driver",
    "Pass": ".passes",
    "PassResult": ".passes",
    "PassTimedOut": ".passes",
    "StepReused": ".passes",
    "PauseResult": ".schedules",
    "RunNowRefused": ".schedules",
    "pause": ".schedules",
    "resume": ".schedules",
    "run_now": ".schedules",
    "StartResult": ".store",
    "cancel": ".store",
    "release": ".store",
    "retry": ".store",
    "start": ".store",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
