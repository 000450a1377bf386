"""Long readers (SPEC §13, revision 4; F7): a steady load while the MVCC horizon is pinned.

    python benchmarks/long_readers.py [--rate 200] [--before 120] [--during 600]
                                      [--after 300] [--hold 120] [--readers 3]

PostgreSQL only. In a fresh database (``leasejobs_bench``, as ``drain.py``'s):

* one ``rundueJobs --loop --concurrency 4`` worker drives ``bench.noop``;
* this process starts about ``--rate`` runs a second of it (two threads, each
  run an instance of its own), paced, the whole time;
* for ``--during`` seconds, ``--readers`` transactions at ``REPEATABLE READ``
  stay open ``--hold`` seconds each, started ``hold / readers`` apart and
  opened again as each ends, so that that many overlap at every moment:
  an analytics query, a long report. Each reads the runs table once, so its
  snapshot pins the horizon: no dead row newer than it can be vacuumed;
* ``--before`` and ``--after`` seconds of the same load without them.

Every 5 s it samples: the runs done since the last sample (throughput), the
due backlog, the time of the worker's own due read (D1's snapshot,
``driver.snapshot()``, sent from this process), and the runs table's live
and dead tuples (``pg_stat_user_tables``). It prints a line per sample and a
table per phase: throughput, due-read p50 / p99, backlog at its end and at
its largest, dead tuples at its end. SPEC §13's target: a due-read p99 of at
most 50 ms and a bounded backlog while the readers are open, and back to the
baseline within 5 minutes after they end.

The run of the process is the parent's: the database is created first, and
the measuring child (``--child``) is this script again with ``DATABASE_URL``
set, as in ``drain.py``; the worker and the readers are ended by the child
whatever happens.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

JOB = "bench.noop"
SAMPLE_EVERY = 5.0
#: As a drive reads its snapshot (``driver.py``): up to this many due runs.
SCAN = 100


def _phase(at: float, args: argparse.Namespace) -> str:
    if at < args.before:
        return "before"
    if at < args.before + args.during:
        return "during"
    return "after"


class Starter(threading.Thread):
    """Starts ``rate`` runs a second until told to stop, paced on the monotonic clock.

    Each run has an instance of its own: a run of a key already live would
    be joined, not started (R1), and the load would be one run at a time.
    """

    def __init__(self, rate: float, name: str, stopping: threading.Event) -> None:
        super().__init__(name=f"starter-{name}", daemon=True)
        self.rate = rate
        self.prefix = name
        self.stopping = stopping
        self.started = 0

    def run(self) -> None:
        from django.db import connection

        from django_leasejobs import start

        began = time.monotonic()
        try:
            while not self.stopping.is_set():
                due = began + self.started / self.rate
                wait = due - time.monotonic()
                if wait > 0:
                    self.stopping.wait(wait)
                    continue
                start(JOB, instance=f"{self.prefix}-{self.started}")
                self.started += 1
        finally:
            connection.close()


class Readers(threading.Thread):
    """``count`` overlapping ``REPEATABLE READ`` transactions, each held ``hold`` seconds."""

    def __init__(self, url: str, count: int, hold: float, until: float) -> None:
        super().__init__(name="readers", daemon=True)
        self.url, self.count, self.hold, self.until = url, count, hold, until
        self.opened = 0

    def run(self) -> None:
        import psycopg

        open_at = [time.monotonic() + n * self.hold / self.count for n in range(self.count)]
        held: list[tuple[float, Any] | None] = [None] * self.count
        try:
            while time.monotonic() < self.until:
                now = time.monotonic()
                for n in range(self.count):
                    slot = held[n]
                    if slot is not None and now >= slot[0]:
                        slot[1].close()  # ends the transaction: its snapshot lets go
                        held[n] = None
                        open_at[n] = now
                    if held[n] is None and now >= open_at[n]:
                        reader = psycopg.connect(self.url)
                        reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                        reader.execute("SELECT count(*) FROM leasejobs_run").fetchone()
                        held[n] = (now + self.hold, reader)
                        self.opened += 1
                time.sleep(0.2)
        finally:
            for slot in held:
                if slot is not None:
                    slot[1].close()


def _sample() -> dict[str, Any]:
    from django.db import connection
    from django.db.models.functions import Now

    from django_leasejobs import RunStatus
    from django_leasejobs.driver import registered, snapshot
    from django_leasejobs.models import Run

    began = time.perf_counter()
    snapshot(registered([JOB]), None, SCAN)
    read_ms = (time.perf_counter() - began) * 1000
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT n_live_tup, n_dead_tup FROM pg_stat_user_tables WHERE relname = %s",
            ["leasejobs_run"],
        )
        live, dead = cursor.fetchone()
    done = Run.objects.filter(status=RunStatus.DONE).count()
    backlog = Run.objects.filter(status=RunStatus.RUNNING, next_attempt_at__lte=Now()).count()
    return {"read_ms": read_ms, "live": live, "dead": dead, "done": done, "backlog": backlog}


def child(args: argparse.Namespace) -> None:
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    url = os.environ["DATABASE_URL"].replace("postgres://", "postgresql://", 1)
    env = {**os.environ, "LEASEJOBS_BENCH_CONN_MAX_AGE": "none"}
    command = [sys.executable, "-m", "django", "rundueJobs", "--loop", "--concurrency", "4"]
    worker = subprocess.Popen(
        [*command, "--job", JOB],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    stopping = threading.Event()
    # Two threads: a start is mostly a round trip, and one thread alone fell short of 200/s.
    starters = [Starter(args.rate / 2, name, stopping) for name in ("a", "b")]
    total = args.before + args.during + args.after
    samples: list[dict[str, Any]] = []
    began = time.monotonic()
    readers = Readers(url, args.readers, args.hold, began + args.before + args.during)
    try:
        for starter in starters:
            starter.start()
        done = 0
        last = began
        while (at := time.monotonic() - began) < total:
            if at >= args.before and readers.ident is None:
                readers.start()
            time.sleep(max(0.0, last + SAMPLE_EVERY - time.monotonic()))
            now = time.monotonic()
            sample = _sample()
            sample |= {"at": round(now - began, 1), "phase": _phase(now - began, args)}
            sample["rate"] = (sample["done"] - done) / (now - last)
            done, last = sample["done"], now
            samples.append(sample)
            print(
                f"{sample['at']:7.1f} s {sample['phase']:6} {sample['rate']:6.0f} runs/s "
                f"backlog {sample['backlog']:6} due read {sample['read_ms']:7.1f} ms "
                f"dead {sample['dead']:8} live {sample['live']:8}",
                flush=True,
            )
    finally:
        stopping.set()
        for starter in starters:
            starter.join(30)
        worker.terminate()
        try:
            worker.wait(60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    started = sum(starter.started for starter in starters)
    result = {"samples": samples, "opened": readers.opened, "started": started, "seconds": total}
    Path(args.result).write_text(json.dumps(result))


def report(args: argparse.Namespace, result: dict[str, Any]) -> None:
    samples = result["samples"]
    print(
        f"\n{args.rate:g} starts/s, one worker at --concurrency 4; {args.readers} "
        f"REPEATABLE READ readers held {args.hold:g} s each during {args.during:g} s "
        f"({result['opened']} opened); {result['started']:,} runs started in "
        f"{result['seconds']:g} s\n"
    )
    print(
        "| phase | runs/s | due read p50 | due read p99 | backlog at end (max) "
        "| dead tuples at end |"
    )
    print("|---|---|---|---|---|---|")
    for phase in ("before", "during", "after"):
        rows = [s for s in samples if s["phase"] == phase]
        if not rows:
            continue
        reads = sorted(s["read_ms"] for s in rows)
        p99 = reads[min(len(reads) - 1, round(0.99 * (len(reads) - 1)))]
        rate = statistics.fmean(s["rate"] for s in rows)
        print(
            f"| {phase} | {rate:.0f} | {statistics.median(reads):.1f} ms | {p99:.1f} ms "
            f"| {rows[-1]['backlog']:,} ({max(s['backlog'] for s in rows):,}) "
            f"| {rows[-1]['dead']:,} |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=200, help="starts/s (default: %(default)s)")
    parser.add_argument("--before", type=float, default=120, help="s (default: %(default)s)")
    parser.add_argument("--during", type=float, default=600, help="s (default: %(default)s)")
    parser.add_argument("--after", type=float, default=300, help="s (default: %(default)s)")
    parser.add_argument("--hold", type=float, default=120, help="s (default: %(default)s)")
    parser.add_argument("--readers", type=int, default=3, help="(default: %(default)s)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0

    from benchmarks.drain import child_result, fresh_database

    arguments = ["--child"]
    for name in ("rate", "before", "during", "after", "hold", "readers"):
        arguments += [f"--{name}", str(getattr(args, name))]
    with tempfile.TemporaryDirectory() as tmp:
        url = fresh_database("postgres", Path(tmp))
        result = child_result(
            __file__, url, Path(tmp) / "long_readers.json", arguments, quiet=False
        )
    report(args, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
