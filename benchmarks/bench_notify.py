"""NOTIFY benchmark (SPEC §13, revision 4): what the commit lock of ``NOTIFY`` costs ``start()``.

    python benchmarks/bench_notify.py [--threads 8 32 64] [--starts-per-thread 250]
                                      [--rounds 3] [--database postgres]

On PostgreSQL every ``start()`` calls ``pg_notify()`` in its ``INSERT``'s
``RETURNING`` list, so that an idle ``--loop`` worker wakes at once (W2). The
call itself is cheap. What it may cost is at commit: PostgreSQL queues a
transaction's notifications while it commits and, to keep them in commit
order, serialises the commits of every transaction that sent one under one
lock for the whole database cluster. Transactions that notified then commit
one at a time -- each waiting for the one before it to flush its WAL -- where
transactions without a notification would flush together (group commit). One
writer never sees it; many writers at once may.

So, for each ``--threads`` count, that many threads -- each with its own
connection, as Django gives each thread its own -- call ``start()`` one by one
in autocommit (every call its own transaction, a new run each, as views
enqueueing work would), ``--starts-per-thread`` times each, released together
through a barrier; once with ``LEASEJOBS["NOTIFY"] = True`` (the default) and
once with ``False``, in one sitting. Each round measures every thread count
both ways, one right after the other, and the order of the two alternates from
round to round (on first in odd rounds, off first in even ones), so that drift
on the machine weighs on both alike. The time of one measurement runs from the
first thread's first call to the last thread's last return; every measurement
starts from an empty run table.

It prints starts/s for each (threads, NOTIFY), over all rounds, and the ratio
on / off for each thread count, as a Markdown table, with each round's figures,
the machine's load average before and after, and PostgreSQL's version. SPEC
§13 asks that at 32 threads on be at least 0.90 of off. The same text goes to
``benchmarks/results/notify-<date>.md``, as ``drain.py`` writes its own.

Checks, each a ``FAIL:`` line and exit status 1: every measurement must leave
exactly threads times starts-per-thread runs in the table, and the setting must be
honoured -- before each measurement the child captures the SQL of one
``start()`` and requires ``pg_notify`` in its ``INSERT`` with ``NOTIFY`` on and
not with it off.

Process layout. Django reads its settings once per process, so the script
re-executes itself as a child per measurement, as ``drain.py`` does, with
``DATABASE_URL`` set and ``--notify on|off``; the child configures Django
with ``benchmarks/settings.py``'s values and ``NOTIFY`` set in ``LEASEJOBS``.
The database, ``leasejobs_notify`` (its own, so that another benchmark's
``leasejobs_bench`` is left alone), is dropped and created again first. The
other settings are the package's defaults (``PREPARE`` ``None``: the insert is
prepared, every call being in autocommit). 64 threads need 64 connections at
once, plus one: the parent checks ``max_connections`` first.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, only benchmarks/ is on sys.path; the settings module and the
# package under test are imported from the repository root.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

JOB = "bench.noop"
DB_NAME = "leasejobs_notify"
BARRIER_TIMEOUT = 120
#: SPEC §13, revision 4: at this many threads, NOTIFY on reaches this share of off.
TARGET_THREADS, TARGET_RATIO = 32, 0.90


# -- the child: one (NOTIFY, threads) measurement -------------------------------------------------


def configure(notify: bool) -> None:
    """Set Django up with ``benchmarks/settings.py`` and ``LEASEJOBS["NOTIFY"] = notify``."""
    import django
    from django.conf import settings

    from benchmarks import settings as bench

    # benchmarks/settings.py reads no NOTIFY of its own; its values, NOTIFY added,
    # configure this process instead of DJANGO_SETTINGS_MODULE.
    values = {name: getattr(bench, name) for name in dir(bench) if name.isupper()}
    values["LEASEJOBS"] = {**bench.LEASEJOBS, "NOTIFY": notify}
    settings.configure(**values)
    django.setup()


def setup() -> dict[str, Any]:
    """Migrate; the server's version and how many connections it has left."""
    from django.db import connection

    from benchmarks.drain import setup_database

    server = setup_database()["server"]
    with connection.cursor() as cursor:
        cursor.execute("SHOW max_connections")
        most = int(cursor.fetchone()[0])
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
        )
        used = int(cursor.fetchone()[0])
    return {"server": server, "free": most - used}


def honoured(notify: bool) -> list[str]:
    """Start one run, capturing its SQL; the failures if its INSERT does not match *notify*."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from django_leasejobs import start

    with CaptureQueriesContext(connection) as captured:
        start(JOB, {"n": -1}, instance="notify-check")
    inserts = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("INSERT")]
    if len(inserts) != 1:
        return [f"one start() sent {len(inserts)} INSERTs, expected 1: {inserts}"]
    if ("pg_notify" in inserts[0]) != notify:
        state = "on" if notify else "off"
        return [f"NOTIFY {state}, but the start's INSERT reads: {inserts[0][:300]}..."]
    return []


def empty_runs() -> None:
    """Empty the run table: each measurement inserts into the same, empty table."""
    from django.db import connection

    from django_leasejobs.models import Run

    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {Run._meta.db_table} CASCADE")


def measure(notify: bool, threads: int, per_thread: int) -> dict[str, Any]:
    """Time *threads* threads each calling ``start()`` *per_thread* times; check the rows."""
    from django.db import connection

    from django_leasejobs import start
    from django_leasejobs.models import Run

    failures = honoured(notify)
    empty_runs()
    barrier = threading.Barrier(threads)
    began: list[float] = [0.0] * threads
    ended: list[float] = [0.0] * threads
    errors: list[str] = []

    def starter(number: int) -> None:
        try:
            connection.ensure_connection()  # this thread's own; opened before the clock starts
            barrier.wait(BARRIER_TIMEOUT)
            began[number] = time.perf_counter()
            for item in range(per_thread):
                start(JOB, {"n": item}, instance=f"{number}-{item}")
            ended[number] = time.perf_counter()
        except BaseException:
            errors.append(traceback.format_exc())  # list.append is atomic under the GIL
            barrier.abort()
        finally:
            connection.close()

    workers = [threading.Thread(target=starter, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if errors:
        raise RuntimeError("a starting thread failed:\n" + "\n".join(errors[:3]))
    rows = Run.objects.count()
    if rows != threads * per_thread:
        failures.append(f"{rows} runs in the table after {threads * per_thread} starts")
    return {"seconds": max(ended) - min(began), "rows": rows, "failures": failures}


def child(args: argparse.Namespace) -> None:
    configure(args.notify == "on")
    if args.child == "setup":
        result = setup()
    else:
        result = measure(args.notify == "on", args.threads[0], args.starts_per_thread)
    Path(args.result).write_text(json.dumps(result))


# -- the parent -----------------------------------------------------------------------------------


def run_child(
    url: str, tmp: Path, action: str, *, notify: bool, threads: int = 1, per_thread: int = 1
) -> dict[str, Any]:
    """Run this script as a child doing *action* with NOTIFY *notify*; its JSON result."""
    result = tmp / "result.json"
    result.unlink(missing_ok=True)
    command = [sys.executable, __file__, "--child", action, "--result", str(result)]
    command += ["--notify", "on" if notify else "off", "--threads", str(threads)]
    command += ["--starts-per-thread", str(per_thread)]
    env = {**os.environ, "DATABASE_URL": url}
    env.pop("DJANGO_SETTINGS_MODULE", None)  # the child configures Django itself
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not result.exists():
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"FAIL: child {action!r} exited with status {done.returncode}")
    found: dict[str, Any] = json.loads(result.read_text())
    return found


def spaced(number: float) -> str:
    """*number* rounded, thousands set apart by a space, as docs/performance.md writes them."""
    return f"{number:,.0f}".replace(",", " ")


def main(args: argparse.Namespace) -> int:
    from benchmarks.drain import fresh_database, machine_info, write_results

    began = time.monotonic()
    load_before = os.getloadavg()
    # seconds[(threads, notify)]: one measurement's time per round.
    seconds: dict[tuple[int, bool], list[float]] = {}
    failed = False
    with tempfile.TemporaryDirectory(prefix="leasejobs-notify-") as tmp_name:
        tmp = Path(tmp_name)
        url = fresh_database(args.database, tmp, DB_NAME)
        database = run_child(url, tmp, "setup", notify=True)
        if database["free"] < max(args.threads) + 1:
            print(
                f"FAIL: the server has {database['free']} connections left, "
                f"{max(args.threads)} threads need {max(args.threads) + 1}"
            )
            return 1
        for number in range(args.rounds):
            order = (True, False) if number % 2 == 0 else (False, True)
            for threads in args.threads:
                for notify in order:
                    result = run_child(
                        url,
                        tmp,
                        "measure",
                        notify=notify,
                        threads=threads,
                        per_thread=args.starts_per_thread,
                    )
                    seconds.setdefault((threads, notify), []).append(result["seconds"])
                    starts = threads * args.starts_per_thread
                    print(
                        f"round {number + 1}: {threads} threads, NOTIFY "
                        f"{'on ' if notify else 'off'}: {starts} starts in "
                        f"{result['seconds']:.3f} s = {spaced(starts / result['seconds'])}/s",
                        flush=True,
                    )
                    for failure in result["failures"]:
                        print(f"FAIL: {threads} threads, NOTIFY {notify}: {failure}", flush=True)
                        failed = True
    load_after = os.getloadavg()

    per_thread: int = args.starts_per_thread

    def rate(threads: int, notify: bool, only: int | None = None) -> float:
        """Starts/s of (*threads*, *notify*): over all rounds, or round *only*."""
        each = seconds[threads, notify]
        timed = each if only is None else [each[only]]
        return threads * per_thread * len(timed) / sum(timed)

    summary: list[str] = []
    rounds: list[str] = []
    for threads in args.threads:
        ratios = [rate(threads, True, n) / rate(threads, False, n) for n in range(args.rounds)]
        summary.append(
            f"| {threads} | {spaced(rate(threads, True))} | {spaced(rate(threads, False))} "
            f"| {rate(threads, True) / rate(threads, False):.2f} "
            f"| {min(ratios):.2f}-{max(ratios):.2f} |"
        )
        for notify in (True, False):
            cells = " | ".join(spaced(rate(threads, notify, n)) for n in range(args.rounds))
            rounds.append(f"| {threads} | {'on' if notify else 'off'} | {cells} |")

    command = "python benchmarks/bench_notify.py " + " ".join(sys.argv[1:])
    report = [
        f"# NOTIFY benchmark, {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}",
        "",
        f"`{command.strip()}` (took {time.monotonic() - began:.0f} s)",
        "",
        "- load average before: {:.2f} {:.2f} {:.2f}; after: {:.2f} {:.2f} {:.2f}".format(
            *load_before, *load_after
        ),
        *machine_info({args.database: database["server"]}),
        "",
        f"`start()` one by one in autocommit, {args.starts_per_thread} per thread, each thread "
        f"its own connection, released together; {args.rounds} rounds, NOTIFY on and off one "
        "after the other, the order alternated. starts/s over all rounds; on / off per round "
        "gives the spread.",
        "",
        "| threads | NOTIFY on, starts/s | NOTIFY off, starts/s | on / off | per round |",
        "|---|---|---|---|---|",
        *summary,
        "",
        "| threads | NOTIFY | " + " | ".join(f"round {n + 1}" for n in range(args.rounds)) + " |",
        "|---|---|" + "---|" * args.rounds,
        *rounds,
        "",
        f"SPEC §13 (revision 4): on / off at least {TARGET_RATIO:.2f} at {TARGET_THREADS} threads.",
        "",
    ]
    text = "\n".join(report)
    print()
    print(text)
    write_results("notify", text)
    if failed:
        print("FAIL: see above")
        return 1
    return 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--threads",
        type=int,
        nargs="+",
        default=[8, 32, 64],
        help="thread counts, each measured in turn (default: 8 32 64)",
    )
    parser.add_argument("--starts-per-thread", type=int, default=250, help="(default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="(default: %(default)s)")
    parser.add_argument(
        "--database",
        choices=["postgres"],
        default="postgres",
        help="NOTIFY is PostgreSQL's (W2) (default: %(default)s)",
    )
    # Internal: how the parent runs one child (see the module docstring).
    parser.add_argument("--child", choices=["setup", "measure"], help=argparse.SUPPRESS)
    parser.add_argument("--notify", choices=["on", "off"], help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if min(args.threads) < 1 or args.starts_per_thread < 1 or args.rounds < 1:
        parser.error("--threads, --starts-per-thread and --rounds must be at least 1")
    return args


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.child:
        child(arguments)
    else:
        sys.exit(main(arguments))
