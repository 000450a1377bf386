"""How much work a year-long outage of a minutely job costs (SPEC §7, S3).

A ``skip`` job scheduled every minute whose ``next_due_at`` is one year in the
past: the next drive must record at most 1 000 missed due times (the newest;
the 524 000-odd older ones are only counted) and move the schedule to the
next minute -- in well under two seconds, not by writing 525 600 rows.

    python benchmarks/restore.py [--databases sqlite postgres mariadb]

Prints a table and exits non-zero if a database took 2 s or more, or wrote
more than 1 000 rows.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.drain import fresh_database

JOB = "bench.minutely_skip"
LIMIT_SECONDS = 2.0


def restore() -> dict[str, Any]:
    """In the child: put the schedule a year behind, then time one drive."""
    from datetime import timedelta

    from benchmarks.drain import setup_database

    setup = setup_database()
    from django_leasejobs import run_due_jobs
    from django_leasejobs.clock import get_clock
    from django_leasejobs.models import Missed, Schedule

    run_due_jobs(jobs=[JOB])  # creates the schedule row (S1)
    now = get_clock().now()
    Schedule.objects.filter(job=JOB).update(next_due_at=now - timedelta(days=365))
    started = time.perf_counter()
    run_due_jobs(jobs=[JOB])
    seconds = time.perf_counter() - started
    row = Schedule.objects.get(job=JOB)
    return {
        "server": setup["server"],
        "seconds": seconds,
        "rows": Missed.objects.filter(job=JOB).count(),
        "next_due_in_future": row.next_due_at > now,
    }


def run_child(url: str, tmp: Path) -> dict[str, Any]:
    """Run this script as a child against *url* (fresh Django settings); return its result."""
    import os
    import subprocess

    result = tmp / "restore.json"
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "benchmarks.settings"}
    done = subprocess.run(
        [sys.executable, __file__, "--child", "restore", "--result", str(result)],
        env=env,
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"FAIL: child exited with status {done.returncode}")
    return dict(json.loads(result.read_text()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--databases",
        nargs="+",
        choices=["sqlite", "postgres", "mariadb"],
        default=["sqlite", "postgres"],
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        Path(args.result).write_text(json.dumps(restore()))
        return 0
    failed = False
    lines = ["| database | drive after a year-long outage | Missed rows written | verdict |"]
    lines.append("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for database in args.databases:
            url = fresh_database(database, Path(tmp))
            result = run_child(url, Path(tmp))
            ok = (
                result["seconds"] < LIMIT_SECONDS
                and result["rows"] <= 1000
                and result["next_due_in_future"]
            )
            failed |= not ok
            lines.append(
                f"| {result['server']} | {result['seconds']:.2f} s | {result['rows']} | "
                f"{'PASS' if ok else 'FAIL'} |"
            )
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
