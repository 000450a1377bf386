"""A rate-limited backlog (SPEC §13 revision 4, C3, C4): what each begin costs, at each concurrency.

    python benchmarks/rated_backlog.py [--runs 600] [--seconds 30] [--concurrency 1 8]
                                       [--database postgres]

``--runs`` runs of ``bench.rated`` (``Limit(rate=Rate(5, per=1 s))``, one key,
a pass that does nothing) are queued at once; then, for each
``--concurrency``, one ``rundueJobs --loop`` worker drives them for
``--seconds`` and is stopped (SIGTERM), and the script reads what the
database counted meanwhile: the runs begun (each pass begins, then
finishes its run), the transactions committed (``pg_stat_database``) and
the rows of the runs table updated (``pg_stat_user_tables``). C3 says the
backlog begins at its rate, 5 a second, at any concurrency; §13 asks that a
begin cost a fixed number of writes, not a rewrite of the backlog held
back. The backlog is queued afresh before each worker.

PostgreSQL only (its statistics views). Prints one line per concurrency
and ``FAIL:`` (exit 1) when a worker begins more than the rate allows.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

JOB = "bench.rated"
RATE = 5  # a second: benchmarks/jobs.py's bench.rated


def counted() -> dict[str, int]:
    """What PostgreSQL has counted so far: commits in this database, rows of runs updated."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")  # this backend's counts, now
        cursor.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
        commits = cursor.fetchone()[0]
        cursor.execute("SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'leasejobs_run'")
        updates = cursor.fetchone()[0]
    return {"commits": commits, "updates": updates}


def settled() -> dict[str, int]:
    """The counts once the statistics collector has everything the worker sent."""
    time.sleep(1.5)  # a backend flushes its counts at most every second, and at exit
    return counted()


def drive(runs: int, seconds: float, concurrency: int) -> dict[str, Any]:
    """Queue *runs* afresh, drive them with one worker for *seconds*; what it cost."""
    from django_leasejobs import RunStatus, start_many
    from django_leasejobs.models import Run

    Run.objects.filter(job=JOB).delete()
    start_many(JOB, [(f"r{n}", {}) for n in range(runs)])
    command = [sys.executable, "-m", "django", "rundueJobs", "--loop", "--job", JOB]
    command += ["--concurrency", str(concurrency), "-v", "0"]
    before = settled()
    worker = subprocess.Popen(command, cwd=ROOT)
    try:
        time.sleep(seconds)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=120)
    after = settled()
    begun = Run.objects.filter(job=JOB, status=RunStatus.DONE).count()
    return {
        "concurrency": concurrency,
        "begun": begun,
        "commits": after["commits"] - before["commits"],
        "updates": after["updates"] - before["updates"],
        "status": worker.returncode,
    }


def child(args: argparse.Namespace) -> None:
    from benchmarks.drain import setup_database

    result: dict[str, Any] = setup_database()
    result["drives"] = [drive(args.runs, args.seconds, c) for c in args.concurrency]
    Path(args.result).write_text(json.dumps(result))


def report(args: argparse.Namespace, result: dict[str, Any]) -> int:
    """Print a line per worker; 1 when one began more than the rate allows."""
    failed = 0
    print(f"{args.runs} runs of Rate({RATE}, per=1 s), {args.seconds:g} s each, {result['server']}")
    print("| concurrency | begins/s | commits/s | run rows updated/s | updated per begin |")
    print("|---|---|---|---|---|")
    for one in result["drives"]:
        per_second = {k: one[k] / args.seconds for k in ("begun", "commits", "updates")}
        per_begin = one["updates"] / one["begun"] if one["begun"] else float("nan")
        print(
            f"| {one['concurrency']} | {per_second['begun']:.2f} | {per_second['commits']:.1f} "
            f"| {per_second['updates']:.1f} | {per_begin:.1f} |"
        )
        if one["begun"] > RATE * args.seconds + 1:  # C3: n per window, n + 1 across its edges
            print(f"FAIL: {one['begun']} begins in {args.seconds:g} s at {RATE} a second")
            failed = 1
    return failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=600, help="(default: %(default)s)")
    parser.add_argument("--seconds", type=float, default=30, help="(default: %(default)s)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0

    from benchmarks.drain import child_result, fresh_database

    arguments = ["--child", "--runs", str(args.runs), "--seconds", str(args.seconds)]
    arguments += ["--concurrency", *map(str, args.concurrency)]
    with tempfile.TemporaryDirectory() as tmp:
        url = fresh_database("postgres", Path(tmp))
        result = child_result(__file__, url, Path(tmp) / "rated.json", arguments, quiet=False)
    return report(args, result)


if __name__ == "__main__":
    sys.exit(main())
