"""Integrations that never cost a pass: metrics and statistics (SPEC F12).

The live metrics of ``rundueJobs --metrics-port`` (O2) and the pass
statistics (O1) are extras counted beside the work. Whatever they raise --
a site's hook, a registry that refuses a label, a bug -- is caught where
they are called: the pass, its tally in the drive's report and the drive
itself go on as if the integration were absent, and the failure is logged
once per kind and process, so a failing hook does not flood the log with one
line per pass. (Tracing has the same rule in :mod:`.tracing`.)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .errors import describe

__all__ = ["contained", "failed_once"]

logger = logging.getLogger("django_leasejobs")

#: The kinds of failure logged so far in this process, under :data:`_lock`: passes on
#: several threads (W5) may fail at once.
_logged: set[str] = set()
_lock = threading.Lock()


def failed_once(kind: str, exc: BaseException) -> None:
    """Log the failure *exc* of the integration *kind*, once per *kind* and process (F12)."""
    with _lock:
        first = kind not in _logged
        _logged.add(kind)
    if first:
        logger.warning(
            "%s failed: %s; passes go on without it (logged once per process)",
            kind,
            describe(exc),
        )


@contextmanager
def contained(kind: str) -> Iterator[None]:
    """Run the block; an ``Exception`` from it is *kind*'s failure, logged once, never raised."""
    try:
        yield
    except Exception as exc:
        failed_once(kind, exc)


def forget() -> None:
    """Log every kind again (tests)."""
    with _lock:
        _logged.clear()
