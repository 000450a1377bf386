"""The last guard against a stray worker: it ends the test run's processes if pytest dies.

Each test ends the processes it started (``conftest._processes_ended``), even
when it fails -- but only while pytest lives. A pytest that is SIGKILLed, or
that crashes inside a C extension, runs no teardown, and the ``rundueJobs
--loop`` workers it started would go on writing to the test database for as
long as the machine is up.

So at the start of a session :func:`watch` marks this process's environment
with a token, which every child inherits (``multiprocessing`` children,
``subprocess`` children through :func:`tests.processes.command_env`, and
their own children: ``faketime``'s, a worker's), and starts a watchdog
holding the read end of a pipe. The pipe ends when pytest does, however it
ends; the watchdog then kills every process whose environment carries the
token. A pytest that exits normally has ended its processes already, and the
watchdog finds none.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid

#: The environment variable every process of this test run inherits.
MARK = "LEASEJOBS_TEST_RUN"


def marked(token: str, exclude: set[int]) -> list[int]:
    """The processes whose environment holds ``MARK=token``, but those in *exclude*."""
    needle = f"{MARK}={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in exclude:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if needle in environ.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def watch() -> subprocess.Popen | None:
    """Mark this process's children and start the watchdog (Linux: it reads ``/proc``).

    Returns the watchdog, whose stdin pytest keeps open until it exits.
    """
    if not os.path.isdir("/proc/self") or MARK in os.environ:
        return None
    token = uuid.uuid4().hex
    env = dict(os.environ)
    os.environ[MARK] = token
    return subprocess.Popen(
        [sys.executable, "-m", "tests.watchdog", token, str(os.getpid())],
        stdin=subprocess.PIPE,
        env=env,  # the watchdog itself is not marked
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        start_new_session=True,  # a Ctrl-C to pytest's terminal does not reach it first
    )


def main(token: str, parent: int) -> None:
    sys.stdin.buffer.read()  # until pytest exits, however it exits
    for pid in marked(token, exclude={os.getpid(), parent}):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
