"""The jobs of the F10, F11 and F13 tests (§17), registered by ``tests/jobs.py``.

* :data:`BRIEF`: a pass that sleeps ``payload["sleep"]`` (default 50 ms) and is done --
  work that needs a connection for a moment, many of them (F10, F11).
* :data:`HUNG`: a handler that never returns when ``payload["hang"]`` (F13): it waits
  on an event no one sets; its timeout is 1 s, its lease 1.5 s, three attempts.
* :data:`HUNG_LONG`: the same, with a timeout and lease of two minutes: a pass still
  well within its timeout when its worker is told to stop.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from django_leasejobs import Retry, job

BRIEF = "tests.faults.stall.brief"
HUNG = "tests.faults.stall.hung"
HUNG_LONG = "tests.faults.stall.hung_long"


def _brief(p):
    time.sleep((p.payload or {}).get("sleep", 0.05))  # the pass's own work, not a wait
    return p.done()


def _hangs(p):
    if (p.payload or {}).get("hang"):
        threading.Event().wait()  # F13: never returns, reaches no step boundary
    return p.done()


job(BRIEF, lease=timedelta(seconds=30))(_brief)
job(
    HUNG,
    lease=timedelta(milliseconds=1500),
    timeout=timedelta(seconds=1),
    retry=Retry(max_attempts=3, base=timedelta(milliseconds=100), cap=timedelta(milliseconds=200)),
)(_hangs)
job(HUNG_LONG, lease=timedelta(minutes=2), timeout=timedelta(minutes=2))(_hangs)
