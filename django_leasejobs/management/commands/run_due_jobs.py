"""``manage.py run_due_jobs``: the conventional lowercase alias of ``rundueJobs``."""

from __future__ import annotations

from .rundueJobs import Command

__all__ = ["Command"]
