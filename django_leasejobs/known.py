"""The name a run is known by: its job's, or for a Django task's run the task's path (SPEC §9).

Every Django task's run is a run of one built-in job, :data:`TASK_JOB`, so
that name alone would lump every task of a site into one line. Wherever a
run is named for people and dashboards -- pass statistics (O1), metrics
labels (O2), spans (O3), the overview's per-job table (O4) and
``leasejobs_status`` -- a task run is named by its task's module path
instead (``shop.tasks.send_receipt``), which its ``instance`` already holds:
the claimed row names it, so naming costs no read and no decode.

Claims, limits, pacing and the registry still know the built-in job: a name
here is what a run is *shown* as, never what drives it. A name is cut to
:data:`JOB_NAME_LENGTH` characters, the statistics' column, so that every
place shows a long task path alike.
"""

from __future__ import annotations

__all__ = ["JOB_NAME_LENGTH", "TASK_JOB", "known_as"]

#: The most characters of a job's name: the ``job`` column of runs, schedules and statistics.
JOB_NAME_LENGTH = 100

#: The built-in job every Django task's run belongs to.
TASK_JOB = "django_leasejobs.task"


def known_as(job: str, instance: str | None) -> str:
    """The name a run of *job* with *instance* is known by (``None``: its instance unread).

    *job*, or for a task run its task's path; a task run whose row could not
    be read back (R9) is known by the built-in job's name.
    """
    name = instance if job == TASK_JOB and instance else job
    return name[:JOB_NAME_LENGTH]
