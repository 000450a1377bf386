"""The per-process chores after a drive's runs, each at most so often (SPEC D6, S7, §3, §11).

Every minute: free the keys of runs cancelled mid-pass whose worker died
(§3 ``cancel``), and report rows stranded by hand edits (§11). Every hour:
prune old finished runs (S7) and old pass statistics (O1), each giving up
after a moment on a locked table (F11). Housekeeping never fails a drive.
"""

from __future__ import annotations

import logging
import threading
import time

from django.db import DatabaseError, router

from . import retention, store
from .conf import conf
from .errors import describe
from .models import Run
from .reading import stranded
from .report import DriveReport, Note
from .store.lock_waits import lock_wait_bounded

__all__ = ["PRUNE_EVERY", "SWEEP_EVERY", "Chores", "chores"]

logger = logging.getLogger("django_leasejobs")

PRUNE_EVERY = 3600.0
SWEEP_EVERY = 60.0


class Chores:
    """When this process last pruned and last looked after keys (monotonic seconds)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.last_prune: float | None = None
        self.last_sweep: float | None = None

    def due(self, clock: float) -> tuple[bool, bool]:
        """Whether the sweep and the prune are due at *clock*; each due one is taken as done."""
        with self._lock:
            sweep = self.last_sweep is None or clock - self.last_sweep >= SWEEP_EVERY
            prune = self.last_prune is None or clock - self.last_prune >= PRUNE_EVERY
            if sweep:
                self.last_sweep = clock
            if prune:
                self.last_prune = clock
        return sweep, prune

    def run(self, report: DriveReport) -> None:
        """D6: the chores that are due, after a drive's runs."""
        sweep, prune = self.due(time.monotonic())
        if sweep:
            try:
                store.release_expired_cancels(conf.SCAN_MAX)
                for run_id, text in stranded(conf.SCAN_MAX):
                    logger.warning("Run id=%s is stranded: %s", run_id, text)
                    report.warnings.append(Note(run_id, f"stranded: {text}"))
            except DatabaseError as exc:
                logger.error("Key housekeeping could not run: %s", describe(exc))
        if prune:
            try:
                # F11: a side table locked (flow control's, the schedules') costs this
                # prune, done again in an hour, not the drive's next passes.
                with lock_wait_bounded(router.db_for_write(Run)):
                    retention.prune()
                retention.prune_stats()  # O1: pass statistics past STATS_RETENTION
            except DatabaseError as exc:
                logger.error("Retention could not run: %s", describe(exc))


#: This process's chores, shared by its drives.
chores = Chores()
