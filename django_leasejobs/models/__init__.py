"""The app's tables (SPEC §2, §7): runs and their step ledger, schedules and the
missed ledger. Only :mod:`django_leasejobs.store` writes a run's status or
lease columns; these classes describe the tables and decode what they hold.
"""

from __future__ import annotations

from .runs import INSTANCE_LENGTH, JOB_NAME_LENGTH, Run, Step
from .schedules import Missed, Schedule

__all__ = ["INSTANCE_LENGTH", "JOB_NAME_LENGTH", "Missed", "Run", "Schedule", "Step"]
