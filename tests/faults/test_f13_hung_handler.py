"""F13: a handler that never returns costs its thread, not the worker (SPEC §17, R10, L10, W5).

Real ``rundueJobs --loop --concurrency 2 --stop-timeout 1`` workers. A job whose
handler waits for ever (``threading.Event().wait()``) past its 1 s timeout, three
attempts: each attempt hangs a thread. Before revision 4 both threads were soon
stuck and the worker ran nothing more, and SIGTERM with ``--stop-timeout`` never
ended it. Now each hung pass is abandoned past its timeout and its thread replaced
(up to N abandoned threads), the drive reports it, other runs complete, and SIGTERM
ends the process after the stop timeout even with a pass still hung in flight.
"""

from __future__ import annotations

import json
import signal

import pytest

from django_leasejobs import RunStatus, start
from django_leasejobs.models import Run
from tests.faults.stall_jobs import BRIEF, HUNG, HUNG_LONG
from tests.processes import django_command, end
from tests.test_concurrency import ready
from tests.utils import wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.concurrency,
    pytest.mark.faults,
]

WAIT = 60  # seconds: generous, for a busy machine


def _worker(*args: str):
    base = ["rundueJobs", "--loop", "--interval", "0.05", "--json"]
    jobs = ["--job", HUNG, "--job", HUNG_LONG, "--job", BRIEF]
    return django_command(*base, *jobs, "--stop-timeout", "1", *args)


def _warnings(out: str) -> list[str]:
    return [note["text"] for line in out.splitlines() for note in json.loads(line)["warnings"]]


def test_f13_hung_handlers_cost_their_threads_and_sigterm_still_ends_the_worker():
    """Three hung attempts of one run on a two-thread worker: the run fails once its
    attempts are spent (L3), ten other runs then complete on the threads that replaced
    the hung ones, and a SIGTERM while yet another pass hangs (well within its own
    timeout) ends the process after ``--stop-timeout``, with status 0, each abandoned
    pass in the drive's warnings and the worker's log."""
    hung = start(HUNG, {"hang": True}, instance="hung").run
    worker = _worker("--concurrency", "2")
    try:
        ready([worker])
        gone = Run.objects.filter(pk=hung.pk).exclude(status=RunStatus.RUNNING)
        wait_for(gone.exists, "the hung run's three attempts spent", WAIT, worker=worker)
        brief = [start(BRIEF, instance=f"b{n}").run.pk for n in range(10)]
        done = Run.objects.filter(pk__in=brief, status=RunStatus.DONE)
        wait_for(
            lambda: done.count() == 10, "ten runs done beside hung passes", WAIT, worker=worker
        )
        hung_long = start(HUNG_LONG, {"hang": True}, instance="long").run
        began = Run.objects.filter(pk=hung_long.pk, lease_began_at__isnull=False)
        wait_for(began.exists, "a pass hung within its timeout", WAIT, worker=worker)
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=WAIT)  # ended: not hung for ever
    finally:
        end(worker)
    assert worker.returncode == 0, err
    assert Run.objects.get(pk=hung.pk).status == RunStatus.FAILED
    abandoned = [text for text in _warnings(out) if "pass abandoned" in text]
    assert len(abandoned) >= 2, (out, err)  # the two threads the first attempts hung
    assert "did not return past its timeout: the thread is abandoned and replaced" in err
    assert "still runs as the worker stops: the thread is abandoned" in err  # the long one


def test_f13_sigterm_ends_a_one_thread_worker_whose_own_thread_is_hung():
    """``--concurrency 1``: the loop's own thread runs the pass, and its handler never
    returns. Nothing can replace that thread, but SIGTERM with ``--stop-timeout``
    still ends the process: its watchdog logs why and exits with 128 + SIGTERM."""
    hung = start(HUNG_LONG, {"hang": True}, instance="one").run
    worker = _worker("--concurrency", "1")
    try:
        ready([worker])
        began = Run.objects.filter(pk=hung.pk, lease_began_at__isnull=False)
        wait_for(began.exists, "the pass hung on the loop's own thread", WAIT, worker=worker)
        worker.send_signal(signal.SIGTERM)
        _out, err = worker.communicate(timeout=WAIT)  # ended: not hung for ever
    finally:
        end(worker)
    assert worker.returncode == 128 + signal.SIGTERM, err
    assert "a handler does not return; exiting, its lease will expire" in err
