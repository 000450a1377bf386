"""Helpers for your own tests: drive what your code started, until nothing is left.

A test of code that starts runs -- a view, a signal receiver, a model's
``save()`` -- wants those runs done before it asserts, without knowing how
many drives or passes that takes. :func:`drive_until_idle` is that loop,
with a bound, so a job that never finishes fails the test instead of
hanging it.
"""

from __future__ import annotations

from collections.abc import Iterable

from .driver import run_due_jobs
from .exceptions import DrivesExhausted
from .report import DriveReport

#: ``DrivesExhausted`` lives in :mod:`.exceptions`; a test imports it from here, as the docs do.
__all__ = ["DrivesExhausted", "drive_until_idle"]


def drive_until_idle(
    *,
    jobs: Iterable[str] | None = None,
    queues: Iterable[str] | None = None,
    max_drives: int = 100,
) -> DriveReport:
    """Drive due runs until a drive finds none; return the drives' combined report.

    Each drive is :func:`~django_leasejobs.run_due_jobs` with its defaults
    (*jobs* and *queues* as it takes them), so a run that advances gets its
    next pass in the next drive, and a follow-up started by a kick is driven
    too. What is not due yet -- a retry's back-off, a ``run_after``, a
    deferred run -- is left for the test to reach, by moving a
    :class:`~django_leasejobs.clock.FrozenClock` and calling this again.

    A failing handler does not raise here: its pass is counted in the
    report, as in any drive. Assert on ``report.errors`` (or ``failed``).

    Raises
    ------
    DrivesExhausted
        Runs were still due after *max_drives* drives; its ``report`` holds
        what those drives did.
    """
    if max_drives < 1:
        raise ValueError("max_drives must be at least 1")
    combined = DriveReport()
    jobs = None if jobs is None else list(jobs)
    queues = None if queues is None else list(queues)
    for _drive in range(max_drives):
        report = run_due_jobs(jobs=jobs, queues=queues)
        combined.merge(report)
        if not report.attempted:
            return combined
    raise DrivesExhausted(max_drives, combined)
