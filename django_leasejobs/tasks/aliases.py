"""The ``TASKS`` aliases on this backend (SPEC §9).

Read from the settings for what Django has not built yet -- the built-in
job's registration at app ready, the checks, the admin's task filter, the
figures -- and from the framework's per-thread backends for a run's own
alias: its options, and the class its signals are sent as.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from django_leasejobs import compat

from .backend import LeaseJobsBackend
from .options import BACKEND_PATH

__all__ = ["backend_named", "our_aliases", "sender_of"]


def our_aliases() -> list[tuple[str, dict[str, Any]]]:
    """The ``TASKS`` aliases whose backend is this one (or a subclass), with their settings."""
    found = []
    for name, params in (getattr(settings, "TASKS", None) or {}).items():
        path = params.get("BACKEND") if isinstance(params, dict) else None
        if path == BACKEND_PATH:
            found.append((name, params))
            continue
        try:
            backend = import_string(path) if isinstance(path, str) else None
        except ImportError:
            continue
        if isinstance(backend, type) and issubclass(backend, LeaseJobsBackend):
            found.append((name, params))
    return found


def backend_named(name: str) -> LeaseJobsBackend | None:
    """This thread's backend of alias *name*, or ``None`` if it is not (or no longer) ours."""
    try:
        found = compat.task_backends[name]
    except Exception:  # an alias no longer configured: InvalidTaskBackend
        return None
    return found if isinstance(found, LeaseJobsBackend) else None


def sender_of(backend: LeaseJobsBackend | None) -> type[LeaseJobsBackend]:
    """What a task signal is sent as: its backend's class, as Django's own backends send it."""
    return LeaseJobsBackend if backend is None else type(backend)
