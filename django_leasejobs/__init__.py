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
from .registry import Job, MissedRule, get_job, job, registry
from .retry import Retry
from .states import FailureCode, RunStatus

if TYPE_CHECKING:
    from .store import StartResult, start

__version__ = "0.1.0.dev0"

__all__ = [
    "Defer",
    "DuplicateJob",
    "FailureCode",
    "InvalidJob",
    "Job",
    "JobNotRegistered",
    "LeaseJobsError",
    "MissedRule",
    "NotQueueSafe",
    "Retry",
    "RunStatus",
    "StartResult",
    "get_job",
    "job",
    "registry",
    "start",
]

#: Public names whose modules import models, by the module that defines them.
_LAZY = {
    "StartResult": ".store",
    "start": ".store",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
