"""The jobs the F6-F8 fault tests drive in real worker processes (imported by ``tests/jobs.py``).

Named ``tests.f678.*``: ``tests/faults/jobs.py`` (F1-F5's) owns ``tests.faults.*``.

Each handler writes one line per invocation to a file of its own process in
``LEASEJOBS_FAULTS_DIR`` -- outside the database, so a full disk (F8) cannot
lose the evidence -- and stamps it with ``time.monotonic_ns()``: the machine's
one monotonic clock, which libfaketime leaves alone (F6 fakes only the wall
clock, as a clock that jumps does), so lines of different processes compare.
Each line also carries the wall clock the process saw (F6 checks that it
really jumped) and the pass's cursor (each pass of a run is invoked once).
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

from django.db.backends.signals import connection_created

from django_leasejobs import Retry, job

#: Lease, retry and timeout of the fault jobs: a pass is a fraction of a second, its
#: lease a few, its timeout (R10) far longer than any pass -- so a timeout that fires
#: is a clock that misfired, never a slow machine.
LEASE = timedelta(seconds=3)
RETRY = Retry(max_attempts=100, base=timedelta(milliseconds=200), cap=timedelta(seconds=1))
TIMEOUT = timedelta(seconds=60)


def _log(kind: str, p, *more: object) -> None:
    folder = os.environ.get("LEASEJOBS_FAULTS_DIR")
    if not folder:
        return
    fields = [kind, p.run.id, p.cursor or 0, p.attempt, time.monotonic_ns(), time.time(), *more]
    with open(os.path.join(folder, f"{os.getpid()}.log"), "a") as log:
        log.write(" ".join(str(field) for field in fields) + "\n")


def walk(p):
    """``passes`` passes of ``steps`` steps of ``step_seconds``; counts each step and pass.

    Every step appends an ``Effect`` row (the side effect), so a step run twice shows.
    """
    from tests.models import Effect

    _log("start", p)
    try:
        position = p.cursor or 0
        for index in range(p.payload["steps"]):
            name = f"{position}:{index}"

            def work(name=name):
                time.sleep(p.payload["step_seconds"])
                Effect.objects.create(run_id=p.run.id, name=name, pid=os.getpid())

            p.step(name, work)
            p.count("steps")
        p.count("passes")
        return p.done() if position + 1 >= p.payload["passes"] else p.advance(position + 1)
    finally:
        _log("end", p)


def beating(p):
    """One pass with no step boundary, ``sleep`` seconds long: only the heartbeat (L10)
    keeps its lease, renewed every third of it on the worker's monotonic clock."""
    _log("start", p)
    try:
        time.sleep(p.payload["sleep"])
        p.count("passes")
        return p.done()
    finally:
        _log("end", p)


def cron(p):
    """A minutely schedule's run: logs the due times it covers (S2)."""
    _log("start", p, ",".join(p.payload.get("covers", [])))
    return p.done()


job("tests.f678.walk", lease=LEASE, retry=RETRY, timeout=TIMEOUT)(walk)
job("tests.f678.beating", lease=LEASE, retry=RETRY, timeout=TIMEOUT, heartbeat=True)(beating)
job("tests.f678.cron", schedule="* * * * *", timezone="UTC", missed="catch_up_once")(cron)


def _max_pages(sender, connection, **kwargs) -> None:
    """F8: every SQLite connection of a worker the test started with
    ``LEASEJOBS_FAULTS_MAX_PAGES`` stops growing the database there (``max_page_count``
    is a connection's own setting, so each of the worker's connections gets it)."""
    pages = os.environ.get("LEASEJOBS_FAULTS_MAX_PAGES")
    if pages and connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute(f"PRAGMA max_page_count = {int(pages)}")


connection_created.connect(_max_pages)
