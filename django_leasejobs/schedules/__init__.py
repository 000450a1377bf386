"""Cron schedules: rows kept in step with the code, due times fired once, the missed-run
rules, and what a schedule reads as (SPEC §7, D6).

The definition is the code (``@job(schedule=...)``); a ``Schedule`` row holds
the state: the next due time, the pause, the last run. One module per job:

* :mod:`.sync` -- S1, the rows follow the code of the jobs a drive registers;
* :mod:`.firing` -- S2 and S3, each due time fired once, the missed-run rules;
* :mod:`.reading` -- S6, the states: reads only;
* :mod:`.overdue` -- S6, ``job_overdue`` once per episode;
* :mod:`.store` -- the one writer of the ``Schedule`` and ``Missed`` rows,
  whoever decides the write (these modules, the operators, retention).

Pausing, resuming and running by hand are operators' verbs
(:mod:`django_leasejobs.operators`).
"""

from __future__ import annotations

from datetime import datetime

from .base import MISSED_MAX, Problem
from .firing import Window, act, cause_of, fire_due_schedules, plan
from .overdue import check_overdue
from .reading import live_runs, orphaned, period, problem, state
from .sync import seen_every, sync_schedules
from .writes import record_outcome

__all__ = [
    "MISSED_MAX",
    "Problem",
    "Window",
    "act",
    "cause_of",
    "check_overdue",
    "fire_due_schedules",
    "handle_schedules",
    "live_runs",
    "orphaned",
    "period",
    "plan",
    "problem",
    "record_outcome",
    "seen_every",
    "state",
    "sync_schedules",
]


def handle_schedules(now: datetime, jobs: set[str] | None) -> list[Problem]:
    """D6, a drive's first phase: sync the rows (S1), fire what is due (S2, S3), send
    ``job_overdue`` (S6). Returns the schedules that could not be handled; every
    other schedule is handled whatever they did.
    """
    problems: list[Problem] = []
    rows = sync_schedules(now, problems)
    fire_due_schedules(now, rows, jobs, problems)
    check_overdue(rows, now, problems)
    return problems
