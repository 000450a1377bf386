"""A job's last failure, read from its newest runs alone (SPEC §16: O4's per-job table)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models.functions import Left

from django_leasejobs.known import TASK_JOB
from django_leasejobs.registry import registry
from django_leasejobs.states import RunStatus

from .now import runs

__all__ = ["ERROR_READ", "FAILURE_SCAN", "Failure", "last_failure", "lookups_for"]

#: How many of a job's newest runs are read for its last failure (O4): a bounded read.
FAILURE_SCAN = 200
#: The most characters of a last error read for the overview: its first line is shown.
ERROR_READ = 500


@dataclass(frozen=True)
class Failure:
    """A job's newest failed, held or retrying run: what the overview's per-job table shows."""

    run: str
    status: str
    code: str
    #: The first line of its last error, cut short.
    error: str


def last_failure(job: str, scan: int = FAILURE_SCAN) -> Failure | None:
    """The newest failed, held or retrying run among *job*'s newest *scan* runs (O4), or None.

    One read along the ``(job, id)`` index, newest first, of at most *scan*
    rows and only their short columns (the error cut to ``ERROR_READ``
    characters): a job with a million finished runs costs the same. A failure
    older than its newest *scan* runs is not found. A cancelled run is not a
    failure; a running one whose last pass failed (``failure_code`` set) is.
    Raises what the backend raises for a row it cannot read back (SPEC §12).

    *job* is the name the runs are known by (§9): a name no job registered
    here has may be a task's path, whose runs are read the same way along the
    ``(instance, id)`` index when no run of a job so named is found
    (:func:`lookups_for`).
    """
    for lookup in lookups_for(job):
        newest = list(
            runs()
            .filter(**lookup)
            .order_by("-id")
            .values_list("id", "status", "failure_code", Left("last_error", ERROR_READ))[:scan]
        )
        if newest:
            return _failing(newest)
    return None


def lookups_for(name: str) -> list[dict[str, str]]:
    """The runs a :func:`~django_leasejobs.known.known_as` name may stand for: filters, in turn.

    A job registered here is known by its own name alone. Any other name is
    a job retired since its statistics were written or, where the tasks
    backend is installed, a task's path (the runs of :data:`TASK_JOB` whose
    ``instance`` it is): nothing written says which, so the job's runs are
    looked for first, each along its own index.
    """
    if name in registry or TASK_JOB not in registry:
        return [{"job": name}]
    return [{"job": name}, {"job": TASK_JOB, "instance": name}]


def _failing(newest: list[tuple[Any, ...]]) -> Failure | None:
    """The first failed, held or retrying run of *newest*, or None."""
    for run, status, code, error in newest:
        failing = status in (RunStatus.FAILED, RunStatus.HELD)
        if failing or (status == RunStatus.RUNNING and code):
            first = (error or "").strip().split("\n", 1)[0]
            return Failure(str(run), str(status), str(code), first[:160])
    return None
