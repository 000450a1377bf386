"""Who holds a lease: host, pid and process start time (SPEC L9).

Written by every claim into ``lease_holder`` for operators, as
``host:pid:start``. ``start`` is the process's start time in clock ticks
since boot (``/proc/<pid>/stat``), so a pid reused by a later process is told
apart from the one that claimed.
"""

from __future__ import annotations

import os
import socket
import time

__all__ = ["current_holder", "process_start"]

_cache: tuple[int, str] | None = None


def process_start(pid: int) -> int | None:
    """Return *pid*'s start time in clock ticks since boot, or ``None`` if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            # The command name (field 2) may contain spaces and parentheses:
            # the fields after it start past the last ')'.
            fields = stat.read().rsplit(b")", 1)[1].split()
        return int(fields[19])  # field 22 of the whole line
    except (OSError, IndexError, ValueError):
        return None


def current_holder() -> str:
    """Return this process's holder identity, ``host:pid:start``."""
    global _cache  # noqa: PLW0603 - computed once per process, re-done after fork
    pid = os.getpid()
    if _cache is None or _cache[0] != pid:
        start = process_start(pid)
        stamp = str(start) if start is not None else f"t{int(time.time())}"
        _cache = (pid, f"{socket.gethostname()}:{pid}:{stamp}")
    return _cache[1]
