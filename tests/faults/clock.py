"""A worker whose wall clock the test moves (F6): libfaketime, with the monotonic clock real.

:func:`faked_clock_env` is the environment of such a worker: libfaketime preloaded,
its offset read from *offset_file* on every clock read (``FAKETIME_NO_CACHE``), so
writing ``+1h`` or ``-1h`` there jumps the worker's wall clock mid-drive, while
``CLOCK_MONOTONIC`` -- what the worker's timeouts, heartbeats and the fault logs
use -- stays real.

libfaketime 0.9.10, with the monotonic clock left real, fails the
``clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)`` behind Python's
``time.sleep`` with EINVAL; a timed wait on a lock (what ``Event.wait`` does)
works. So the worker's ``time.sleep`` becomes a timed Event wait -- the same
monotonic wait by another call -- through a ``sitecustomize`` on its
``PYTHONPATH``. Nothing else of the process is changed.
"""

from __future__ import annotations

import glob
from pathlib import Path

from tests.utils import tool

SLEEP_ON_AN_EVENT = '''"""time.sleep as a timed Event wait (libfaketime's EINVAL)."""
import threading
import time


def _sleep(seconds):
    if seconds > 0:
        threading.Event().wait(seconds)


time.sleep = _sleep
'''


def libfaketime() -> str:
    """The path of libfaketime's preload library (Debian's ``libfaketime``, with ``faketime``)."""
    tool("faketime")
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    assert found, "libfaketime.so.1 not found: apt-get install libfaketime"
    return found[0]


def faked_clock_env(offset_file: Path) -> dict[str, str]:
    """The environment of a worker whose wall clock follows *offset_file* (``+0`` to start)."""
    shim = offset_file.parent / f"{offset_file.name}-shim"
    shim.mkdir(exist_ok=True)
    (shim / "sitecustomize.py").write_text(SLEEP_ON_AN_EVENT)
    if not offset_file.exists():
        offset_file.write_text("+0\n")
    return {
        "LD_PRELOAD": libfaketime(),
        "FAKETIME_TIMESTAMP_FILE": str(offset_file),
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "NO_FAKE_STAT": "1",
        "PYTHONPATH": str(shim),
    }
