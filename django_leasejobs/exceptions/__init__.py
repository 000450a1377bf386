"""Every exception django-leasejobs raises, in one hierarchy under :class:`LeaseJobsError`.

Each class's docstring is its default message. Where a Django or Python
exception means the same thing, the class derives from it too, so existing
handling keeps working: an invalid job is an ``ImproperlyConfigured``, an
unsafe payload a ``ValidationError``, a refused argument a ``ValueError``.

Two exceptions stand outside the hierarchy on purpose: :class:`LeaseLost` and
:class:`PassInterrupted` are ``BaseException`` s, like
``asyncio.CancelledError``, so a handler's ``except Exception`` cannot
swallow them. Some are re-exported where their users import them:
:class:`RedactedError` from ``django_leasejobs.tasks``,
:class:`DrivesExhausted` from ``django_leasejobs.testing``.

Written by who meets them: :mod:`.refusals` (refused before anything is
written), :mod:`.passes` (what a pass raises, meets, or ends with),
:mod:`.tasks` (the task backend's and the test helpers'), under the root in
:mod:`.base`. Each is imported from here, by this module's name.
"""

from __future__ import annotations

from .base import LeaseJobsError
from .passes import (
    DecodeFailed,
    Defer,
    LeaseLost,
    PassAbandoned,
    PassInterrupted,
    PassTimedOut,
    RunCancelled,
    StepFailed,
    StepInTransaction,
    StepReused,
    UnreadableRow,
)
from .refusals import (
    DatabaseFull,
    DuplicateJob,
    InvalidJob,
    InvalidKey,
    InvalidNote,
    InvalidSchedule,
    JobNotRegistered,
    NotQueueSafe,
    RetryRefused,
    RunNowRefused,
    StartContended,
)
from .tasks import BackoffFailed, DrivesExhausted, RedactedError, TaskGone

__all__ = [
    "BackoffFailed",
    "DatabaseFull",
    "DecodeFailed",
    "Defer",
    "DrivesExhausted",
    "DuplicateJob",
    "InvalidJob",
    "InvalidKey",
    "InvalidNote",
    "InvalidSchedule",
    "JobNotRegistered",
    "LeaseJobsError",
    "LeaseLost",
    "NotQueueSafe",
    "PassAbandoned",
    "PassInterrupted",
    "PassTimedOut",
    "RedactedError",
    "RetryRefused",
    "RunCancelled",
    "RunNowRefused",
    "StartContended",
    "StepFailed",
    "StepInTransaction",
    "StepReused",
    "TaskGone",
    "UnreadableRow",
]

# Each class is known by this module's path, the one its users import: a Django
# task's error records it (``TaskError.exception_class_path``), and a path stored
# in a row must keep importing whichever file here the class is written in.
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
