"""Metrics scrape benchmark: is a scrape of the metrics view cheap with a big history (SPEC §16 O2)?

    python benchmarks/metrics_scrape.py [--runs 1000000] [--live 5000] [--days 30]
                                        [--databases postgres [sqlite]] [--repeat 50]
                                        [--limit-ms 50]

For each database it creates a fresh database, migrates, and fills it as a
site a month old would be:

* ``--runs`` retained runs, the mix of ``admin_list.py`` (its ``seed``:
  mostly finished, 1 000 running and 100 held among them);
* ``--live`` more live runs over five queues: due now (some for an hour),
  due later, throttled, and one of the queues paused;
* ``--days`` of pass statistics (O1): five jobs, two outcomes, every minute
  (30 days: 432 000 rows), the last of them in the current minute;

then VACUUM ANALYZE (ANALYZE on SQLite), and times the view
``django_leasejobs.views.metrics`` called with a ``RequestFactory`` request
carrying the bearer token: one warm-up, then ``--repeat`` scrapes, min /
median / max. One more scrape is captured to count its statements and to
EXPLAIN each of them (with ANALYZE on PostgreSQL).

It exits with status 1 when the median passes ``--limit-ms`` (SPEC §16:
50 ms), when a statement reads a whole table (a Seq Scan of the run or the
statistics table, a SQLite SCAN without an index), or when the figures
scraped are not the database's own (the due runs per queue, the passes of
the last 15 minutes).

Process layout as in ``drain.py`` and ``admin_list.py``: the parent never
imports Django's ORM; it prepares each database and re-runs this script as
a child with ``DATABASE_URL`` set.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, only benchmarks/ is on sys.path; the settings module, the
# package under test and the other benchmarks' helpers come from the repository root.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The database set-up, the machine description and the million runs are the other
# benchmarks' own, so that the numbers can be read side by side.
from benchmarks import admin_list  # noqa: E402
from benchmarks.admin_list import explain, log, register_jobs  # noqa: E402
from benchmarks.drain import (  # noqa: E402
    fresh_database,
    machine_info,
    setup_database,
    write_results,
)

CHILD_TIMEOUT = 3600
TOKEN = "benchmark-scrape-token-0123456789"
#: The statistics' jobs and outcomes: every minute, each (job, outcome) has one row.
STAT_JOBS = ("reports.daily", "billing.invoices", "search.reindex", "mail.digest", "sync.crm")
STAT_OUTCOMES = ("completed", "retrying")
LIVE_QUEUES = ("default", "mail", "reports", "webhooks", "bulk")
PAUSED_QUEUE = "bulk"
SQLITE_BATCH = 10_000
BUCKET_COLUMNS = ", ".join(f"le_{index:02}" for index in range(14))

# Every % is a placeholder (psycopg's pyformat), so arithmetic uses mod().
PG_STATS = f"""
INSERT INTO leasejobs_passstat (
    minute, job, queue, outcome, count, total_seconds, max_seconds, {BUCKET_COLUMNS}
)
SELECT
    %(first)s::timestamptz + m * interval '1 minute',
    (%(jobs)s::text[])[1 + j],
    'default',
    (%(outcomes)s::text[])[1 + o],
    n,
    n * 0.04,
    0.3,
    0, 0, 0, n - 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0
FROM generate_series(0, %(minutes)s - 1) AS m,
     generate_series(0, %(job_count)s - 1) AS j,
     generate_series(0, %(outcome_count)s - 1) AS o,
     LATERAL (SELECT CASE WHEN o = 0 THEN 10 + mod(m + j, 7) ELSE 1 END AS n) AS counted
"""
SQLITE_STATS = (
    "INSERT INTO leasejobs_passstat (minute, job, queue, outcome, count, total_seconds, "
    f"max_seconds, {BUCKET_COLUMNS}) VALUES ({', '.join(['%s'] * 21)})"
)


def passes_in(m: int, o: int, j: int) -> int:
    """The passes of minute *m*, outcome *o*, job *j*; PG_STATS says the same in SQL."""
    return 10 + (m + j) % 7 if o == 0 else 1


def stat_rows(first: datetime.datetime, minutes: int) -> Any:
    """The rows of PG_STATS, in Python, for executemany (naive UTC, as Django stores them)."""
    for m in range(minutes):
        minute = str(first + datetime.timedelta(minutes=m))
        for j, job in enumerate(STAT_JOBS):
            for o, outcome in enumerate(STAT_OUTCOMES):
                n = passes_in(m, o, j)
                buckets = [0, 0, 0, n - 1, 0, 1] + [0] * 8
                yield (minute, job, "default", outcome, n, n * 0.04, 0.3, *buckets)


# -- the child: seed one database and time its scrapes ---------------------------------------


def seed_stats(days: int, now: datetime.datetime) -> dict[str, Any]:
    """O1's statistics of *days* days, the last minute being *now*'s."""
    from django.db import connection, transaction

    minutes = days * 1440
    last = now.replace(second=0, microsecond=0)
    first = last - datetime.timedelta(minutes=minutes - 1)
    began = time.monotonic()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                PG_STATS,
                {
                    "first": first,
                    "jobs": list(STAT_JOBS),
                    "outcomes": list(STAT_OUTCOMES),
                    "minutes": minutes,
                    "job_count": len(STAT_JOBS),
                    "outcome_count": len(STAT_OUTCOMES),
                },
            )
        else:
            rows = stat_rows(first.replace(tzinfo=None), minutes)
            with transaction.atomic():
                while batch := list(itertools.islice(rows, SQLITE_BATCH)):
                    cursor.executemany(SQLITE_STATS, batch)
    # The passes the view must show: those of the window's 15 minutes, the current one included.
    window = range(minutes - 15, minutes)
    expected = {
        (job, outcome): sum(passes_in(m, o, j) for m in window)
        for j, job in enumerate(STAT_JOBS)
        for o, outcome in enumerate(STAT_OUTCOMES)
    }
    return {
        "rows": minutes * len(STAT_JOBS) * len(STAT_OUTCOMES),
        "insert_s": time.monotonic() - began,
        "expected": expected,
    }


def seed_live(live: int, now: datetime.datetime) -> None:
    """*live* more live runs over :data:`LIVE_QUEUES`: due, due later, throttled; one queue paused.

    Ids after the retained runs' (``Z`` sorts after hex digits), as newer runs' would be.
    """
    from django_leasejobs.models import PausedQueue, Run

    runs = []
    for n in range(live):
        queue = LIVE_QUEUES[n % len(LIVE_QUEUES)]
        job = STAT_JOBS[n % len(STAT_JOBS)]
        instance = f"live-extra-{n}"
        kind = n % 10
        if kind < 6:  # due: up to an hour ago
            due = now - datetime.timedelta(seconds=n % 3600)
        elif kind < 9:  # due later: a retry's back-off, a run_after
            due = now + datetime.timedelta(minutes=1 + n % 120)
        else:  # throttled: due again in a second
            due = now + datetime.timedelta(seconds=1)
        runs.append(
            Run(
                id=f"Z{n:025d}",
                job=job,
                instance=instance,
                live_key=f"{job}|{instance}",
                queue=queue,
                priority=n % 21 - 10,
                started_at=due - datetime.timedelta(minutes=5),
                updated_at=due - datetime.timedelta(minutes=5),
                next_attempt_at=due,
                throttled_by="rate" if kind == 9 else "",
            )
        )
    Run.objects.bulk_create(runs, batch_size=1000)
    PausedQueue.objects.create(queue=PAUSED_QUEUE, paused_by="bench", paused_at=now)


def analyze() -> float:
    from django.db import connection

    began = time.monotonic()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # As admin_list.py: a table this old would have been vacuumed by autovacuum.
            cursor.execute("VACUUM ANALYZE leasejobs_run")
            cursor.execute("VACUUM ANALYZE leasejobs_passstat")
        else:
            cursor.execute("ANALYZE")
    return time.monotonic() - began


# Plan lines that read a whole table of the history instead of a range of an index.
PG_FULL_SCAN_RE = re.compile(r"Seq Scan on (leasejobs_run|leasejobs_passstat)\b")
SQLITE_FULL_SCAN_RE = re.compile(r"^SCAN (leasejobs_run|leasejobs_passstat)\s*$", re.M)


def full_scan(plan: str) -> bool:
    from django.db import connection

    pattern = PG_FULL_SCAN_RE if connection.vendor == "postgresql" else SQLITE_FULL_SCAN_RE
    return bool(pattern.search(plan))


def check_figures(text: str, expected_passes: dict[tuple[str, str], int]) -> list[str]:
    """What the scrape says against what the database holds; the differences."""
    from django.db.models import Count
    from prometheus_client.parser import text_string_to_metric_families

    from django_leasejobs.clock import get_clock
    from django_leasejobs.models import Run

    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    now = get_clock().now()
    real_due = dict(
        Run.objects.filter(status="running", next_attempt_at__lte=now)
        .values_list("queue")
        .annotate(n=Count("id"))
        .order_by()
        .values_list("queue", "n")
    )
    scraped_due = {s.labels["queue"]: s.value for s in samples if s.name == "leasejobs_due_runs"}
    problems = []
    # Runs fall due between the scrape and this read (the "due later" ones): never fewer.
    for queue, n in scraped_due.items():
        if not 0 <= real_due.get(queue, 0) - n <= 5:
            problems.append(f"due runs of {queue!r}: scraped {n}, the database has {real_due}")
    scraped_passes = {
        (s.labels["job"], s.labels["outcome"]): s.value
        for s in samples
        if s.name == "leasejobs_passes_15m"
    }
    # The current minute may have turned between seeding and scraping: one minute's slack.
    for key, n in expected_passes.items():
        if not n - 20 <= scraped_passes.get(key, 0) <= n:
            problems.append(f"passes of {key}: scraped {scraped_passes.get(key)}, expected {n}")
    paused = [s.labels["queue"] for s in samples if s.name == "leasejobs_queue_paused" and s.value]
    if paused != [PAUSED_QUEUE]:
        problems.append(f"paused queues scraped: {paused}")
    return problems


def measure(repeat: int, expected_passes: dict[tuple[str, str], int]) -> dict[str, Any]:
    from django.conf import settings
    from django.db import connection
    from django.test import RequestFactory, override_settings
    from django.test.utils import CaptureQueriesContext

    from django_leasejobs.views import metrics

    request = RequestFactory().get(
        "/metrics/leasejobs", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    leasejobs = {**getattr(settings, "LEASEJOBS", {}), "METRICS_TOKEN": TOKEN}
    with override_settings(LEASEJOBS=leasejobs):

        def scrape() -> str:
            response = metrics(request)
            if response.status_code != 200:
                raise RuntimeError(
                    f"the view answered {response.status_code}: {response.content!r}"
                )
            return response.content.decode()

        text = scrape()  # warm-up: a warm connection, imports done
        times = []
        for _ in range(repeat):
            began = time.perf_counter()
            scrape()
            times.append((time.perf_counter() - began) * 1000)
        timings: list[float] = []

        def timed(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
            began = time.perf_counter()
            try:
                return execute(sql, params, many, context)
            finally:
                timings.append((time.perf_counter() - began) * 1000)

        with CaptureQueriesContext(connection) as captured, connection.execute_wrapper(timed):
            text = scrape()
    statements = [
        {"sql": q["sql"], "ms": ms, "plan": explain(q["sql"])}
        for q, ms in zip(captured, timings, strict=True)
    ]
    problems = check_figures(text, expected_passes)
    problems += [
        f"a statement reads a whole table: {s['sql']}\n{s['plan']}"
        for s in statements
        if full_scan(s["plan"])
    ]
    return {
        "median_ms": statistics.median(times),
        "min_ms": min(times),
        "max_ms": max(times),
        "statements": statements,
        "bytes": len(text.encode()),
        "series": sum(1 for line in text.splitlines() if line and not line.startswith("#")),
        "problems": problems,
    }


def child(args: argparse.Namespace) -> None:
    server = setup_database()["server"]  # django.setup() and migrate, as in drain.py
    from django.db.models import Count

    from django_leasejobs.models import Run

    register_jobs()
    now = datetime.datetime.now(datetime.UTC)
    log(f"{server}: inserting {args.runs:,} runs")
    seeded = admin_list.seed(args.runs)
    log(f"inserted in {seeded['insert_s']:.1f} s; {args.live:,} more live runs")
    seed_live(args.live, now)
    log(f"{args.days} days of statistics")
    stats = seed_stats(args.days, now)
    log(f"{stats['rows']:,} statistics rows in {stats['insert_s']:.1f} s; analyzing")
    analyzed = analyze()
    live = dict(
        Run.objects.filter(status__in=("running", "held"))
        .values_list("status")
        .annotate(n=Count("id"))
        .order_by()
        .values_list("status", "n")
    )
    measured = measure(args.repeat, stats["expected"])
    log(f"scrape: median {measured['median_ms']:.1f} ms")
    result = {
        "server": server,
        "seed": seeded,
        "stats_rows": stats["rows"],
        "stats_insert_s": stats["insert_s"],
        "analyze_s": analyzed,
        "live": live,
        "measured": measured,
    }
    Path(args.result).write_text(json.dumps(result))


# -- the parent ------------------------------------------------------------------------------


def run_child(url: str, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    result = tmp / "result.json"
    result.unlink(missing_ok=True)
    command = [sys.executable, __file__, "--child", "--result", str(result)]
    command += ["--runs", str(args.runs), "--live", str(args.live), "--days", str(args.days)]
    command += ["--repeat", str(args.repeat)]
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "benchmarks.settings"}
    # Not captured: the child's progress lines are worth seeing during a long insert.
    done = subprocess.run(command, env=env, cwd=ROOT, check=False, timeout=CHILD_TIMEOUT)
    if done.returncode != 0 or not result.exists():
        raise SystemExit(f"FAIL: child exited with status {done.returncode}")
    return json.loads(result.read_text())


def one_line(sql: str, limit: int = 160) -> str:
    text = " ".join(sql.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe(database: str, result: dict[str, Any], limit_ms: float) -> tuple[list[str], list[str]]:
    """The Markdown section of one database, and what failed in it."""
    measured = result["measured"]
    problems = list(measured["problems"])
    if measured["median_ms"] > limit_ms:
        problems.append(f"median {measured['median_ms']:.1f} ms > {limit_ms:.0f} ms")
    runs = sum(result["seed"]["counts"].values())
    live = ", ".join(f"{status} {n:,}" for status, n in sorted(result["live"].items()))
    plan_kind = "EXPLAIN (ANALYZE, BUFFERS)" if database == "postgres" else "EXPLAIN QUERY PLAN"
    lines = [
        f"## {database}: {result['server']}",
        "",
        f"{runs:,} retained runs ({result['seed']['size']}) and the extra live runs: live now "
        f"{live}; {result['stats_rows']:,} statistics rows (inserted in "
        f"{result['stats_insert_s']:.1f} s); analyzed in {result['analyze_s']:.1f} s.",
        "",
        "| scrapes | median ms | min ms | max ms | statements | series | bytes |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        f"| {result['repeat']} | {measured['median_ms']:.1f} "
        f"| {measured['min_ms']:.1f} | {measured['max_ms']:.1f} | {len(measured['statements'])} "
        f"| {measured['series']} | {measured['bytes']:,} |",
        "",
        f"### The statements of one scrape ({plan_kind})",
        "",
    ]
    for statement in measured["statements"]:
        lines += [
            f"- {statement['ms']:.2f} ms: `{one_line(statement['sql'], 140)}`",
            "",
            "  ```",
            *(f"  {line}" for line in statement["plan"].splitlines()),
            "  ```",
            "",
        ]
    return lines, [f"{database}: {problem}" for problem in problems]


def main(args: argparse.Namespace) -> int:
    began = time.monotonic()
    servers: dict[str, str] = {}
    sections: list[str] = []
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="leasejobs-metrics-") as tmp_name:
        tmp = Path(tmp_name)
        for database in args.databases:
            print(f"{database}: fresh database", flush=True)
            result = run_child(fresh_database(database, tmp), tmp, args)
            result["repeat"] = args.repeat
            servers[database] = result["server"]
            section, failed = describe(database, result, args.limit_ms)
            sections += section
            problems += failed
    elapsed = time.monotonic() - began
    command = "python benchmarks/metrics_scrape.py " + " ".join(sys.argv[1:])
    report = [
        f"# Metrics scrape benchmark, {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}",
        "",
        f"`{command.strip()}` (took {elapsed:.0f} s)",
        "",
        *machine_info(servers),
        "",
        f"Each scrape: `django_leasejobs.views.metrics` called with a `RequestFactory` GET "
        f"carrying the bearer token (the view, the reads, the exposition; no middleware); one "
        f"warm-up, then {args.repeat} timed. Limit: median {args.limit_ms:.0f} ms (SPEC §16 O2).",
        "",
        *sections,
        *(f"FAIL: {problem}" for problem in problems),
        "" if problems else "Within the limit; no statement reads a whole table; figures checked.",
        "",
    ]
    text = "\n".join(report)
    print()
    print(text)
    write_results("metrics-scrape", text)
    return 1 if problems else 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs", type=int, default=1_000_000, help="retained runs (default 1000000)"
    )
    parser.add_argument(
        "--live", type=int, default=5_000, help="extra live runs over five queues (default 5000)"
    )
    parser.add_argument("--days", type=int, default=30, help="days of pass statistics (default 30)")
    parser.add_argument(
        "--databases",
        nargs="+",
        choices=["sqlite", "postgres"],
        default=["postgres"],
        help="default: postgres",
    )
    parser.add_argument("--repeat", type=int, default=50, help="timed scrapes (default 50)")
    parser.add_argument(
        "--limit-ms", type=float, default=50, help="largest median scrape (default 50)"
    )
    # Internal: how the parent runs the child (see the module docstring).
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    # admin_list.seed's mix: fewer runs than this and its held, failed and running runs overlap.
    if args.runs < 10_000:
        parser.error("--runs must be at least 10000")
    if args.days < 1 or args.live < 0 or args.repeat < 1:
        parser.error("--days and --repeat must be at least 1, --live at least 0")
    return args


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.child:
        child(arguments)
    else:
        sys.exit(main(arguments))
