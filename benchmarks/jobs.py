"""The benchmark's jobs (autodiscovered: ``benchmarks`` is an installed app).

Each handler notes when this process first entered a handler, so the drain
time starts at real work rather than at process start-up or the barrier.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

from django_leasejobs import Limit, Rate, Retry, job

#: ``drain.py --io MS``: each no-op pass blocks this long after it counts (I/O-bound work).
SLEEP = float(os.environ.get("LEASEJOBS_BENCH_SLEEP_MS", "0")) / 1000

#: ``time.monotonic_ns()`` when a handler first ran in this process; read by
#: the worker in ``benchmarks/drain.py``.
first_handler_start_ns: int | None = None


def _note_start() -> None:
    global first_handler_start_ns  # noqa: PLW0603 - per-process timing is the point
    if first_handler_start_ns is None:
        first_handler_start_ns = time.monotonic_ns()


@job("bench.noop")
def noop(p):
    _note_start()
    p.count("calls")
    if SLEEP:
        time.sleep(SLEEP)  # a call to a slow upstream (drain.py --io)
    return p.done()


@job("bench.steps")
def steps(p):
    _note_start()
    for i in range(p.payload["steps"]):
        p.step(f"s{i}", lambda i=i: i)  # Bound now: ruff B023, though each runs at once.
    return p.done()


@job("bench.minutely_skip", schedule="* * * * *", timezone="UTC", missed="skip")
def minutely_skip(p):
    return p.done()


def touch(batch):
    """``bench_walk.py``'s batch work: one UPDATE of the batch's rows, each ``touched`` + 1."""
    from django.db.models import F

    from benchmarks.models import WalkRow

    WalkRow.objects.filter(pk__in=[row.pk for row in batch]).update(touched=F("touched") + 1)


@job(
    "bench.walk",
    lease=timedelta(seconds=10),
    # bench_walk.py --kill-every: each SIGKILL charges the pass it cut short one attempt (L3).
    retry=Retry(max_attempts=1000, base=timedelta(milliseconds=50), cap=timedelta(seconds=1)),
)
def walk(p):
    from benchmarks.models import WalkRow

    return p.walk(WalkRow.objects.all(), touch, size=p.payload["size"])


@job("bench.rated", limit=Limit(rate=Rate(5, per=timedelta(seconds=1))))
def rated(p):
    """``rated_backlog.py``: a pass that begins under its rate and does nothing else (C3)."""
    return p.done()
