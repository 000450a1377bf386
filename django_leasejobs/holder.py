"""Who holds a lease, and whether that process is provably gone (SPEC L9).

Every claim writes ``lease_holder`` as ``host:pid:start:space``:

* ``host`` -- the host name, for operators;
* ``pid`` and ``start`` -- the process id and its start time in clock ticks
  since boot (``/proc/<pid>/stat``), so a pid that the kernel later reuses
  for another process is told apart from the one that claimed;
* ``space`` -- the pid namespace and boot, so two containers that share a
  host name (and number their pids independently), or a machine that has
  rebooted since, never judge each other's pids.

A drive on the same host may release a lease early only when the holder is
provably gone: the pid does not exist, or exists with another start time.
Anything uncertain -- another host or namespace, no ``/proc``, a format we do
not know -- answers "not gone", and the lease simply runs to its expiry.
"""

from __future__ import annotations

import os
import socket
from typing import NamedTuple

__all__ = ["Holder", "current_holder", "is_gone", "process_start"]


class Holder(NamedTuple):
    host: str
    pid: int
    start: int
    space: str

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}:{self.start}:{self.space}"

    @classmethod
    def parse(cls, text: str) -> Holder | None:
        """Read a ``lease_holder`` value; ``None`` if it is not in our format."""
        parts = text.split(":")
        if len(parts) != 4 or not parts[0]:
            return None
        host, pid, start, space = parts
        if not (pid.isdigit() and start.isdigit() and space):
            return None
        return cls(host, int(pid), int(start), space)


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


def _space() -> str:
    try:
        namespace = os.readlink("/proc/self/ns/pid").strip("pid:[]")
        with open("/proc/sys/kernel/random/boot_id") as boot:
            return f"{namespace}.{boot.read().strip()[:8]}"
    except OSError:
        return ""


#: Unguarded: threads that race to fill it compute the same value, set in one assignment.
_cache: tuple[int, Holder | None] | None = None


def _me() -> Holder | None:
    """This process as a holder, or ``None`` where pids cannot be judged (no /proc)."""
    global _cache  # noqa: PLW0603 - computed once per process, again after a fork
    pid = os.getpid()
    if _cache is None or _cache[0] != pid:
        start, space = process_start(pid), _space()
        me = Holder(socket.gethostname(), pid, start, space) if start and space else None
        _cache = (pid, me)
    return _cache[1]


def current_holder() -> str:
    """Return this process's ``lease_holder`` text."""
    me = _me()
    return str(me) if me else f"{socket.gethostname()}:{os.getpid()}:0:unknown"


def is_gone(text: str) -> bool:
    """Return ``True`` only if the process that wrote *text* provably no longer runs."""
    me, holder = _me(), Holder.parse(text)
    if me is None or holder is None:
        return False
    if (holder.host, holder.space) != (me.host, me.space) or holder.pid == me.pid:
        return False
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return True  # no such process
    except PermissionError:
        pass  # it exists, under another user
    start = process_start(holder.pid)
    return start is not None and start != holder.start  # the pid was reused
