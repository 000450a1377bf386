"""C5 (revision 3): a looser or removed limit takes effect at the next drive, not after its wait.

A job's limit is code, so it changes with a deploy: a new process. Its first
drive re-judges the runs of every job it registers by the limits as they are
now (:func:`store.rejudge`); under an unchanged rule that writes nothing.
"""

from __future__ import annotations

import logging
import threading

from django.db import DatabaseError

from . import store
from .errors import describe
from .limits import Limit
from .registry import Job
from .report import DriveReport, Note

__all__ = ["Judged", "judged", "rejudge_limits"]

logger = logging.getLogger("django_leasejobs")


class Judged:
    """The limit each job was last driven under in this process (C5).

    A job's limit is code, so it changes with a deploy: a new process. Its
    first drive re-judges the runs of every job it registers by the limits as
    they are now (:func:`store.rejudge`), and a later drive only a job whose
    limit changed since (a test, or code that registers jobs at run time).
    A job first registered after the first drive was never driven under
    another limit here: it costs no statement.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[str, Limit | None] | None = None

    def changed(self, specs: list[Job]) -> list[Job]:
        """The jobs among *specs* to re-judge now; each is then taken as judged."""
        with self._lock:
            first = self._seen is None
            seen = self._seen = {} if self._seen is None else self._seen
            due = [s for s in specs if first or (s.name in seen and seen[s.name] != s.limit)]
            seen |= {spec.name: spec.limit for spec in specs}
            return due

    def forget(self) -> None:
        with self._lock:
            self._seen = None


judged = Judged()


def rejudge_limits(specs: list[Job], report: DriveReport) -> None:
    """C5: a looser or removed limit takes effect at this drive, never after the old rule's wait."""
    due = judged.changed(specs)
    if not due:
        return
    try:
        unlimited = tuple(spec.name for spec in due if spec.limit is None)
        moved = store.rejudge(unlimited, None) if unlimited else 0
        for spec in due:
            if spec.limit is not None:
                moved += store.rejudge((spec.name,), spec.limit)
    except DatabaseError as exc:
        judged.forget()  # the next drive tries again
        report.errors.append(Note("", f"limits not re-judged: {describe(exc)}"))
        return
    if moved:
        logger.info("Runs re-judged by their jobs' limits as they are now: %s", moved)
