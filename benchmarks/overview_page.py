"""Overview benchmark: does the operators' overview render in < 300 ms (SPEC §16 O4)?

    python benchmarks/overview_page.py [--runs 1000000] [--days 30] [--jobs 5]
                                       [--repeat 20] [--limit-ms 300]
                                       [--database leasejobs_bench]

On PostgreSQL (the production database, §12) it creates a fresh database
(``--database``, ``leasejobs_bench`` by default, dropped first, as the other
benchmarks do: name another to run beside them), migrates,
inserts ``--runs`` retained runs exactly as ``admin_list.py`` does (its
``seed``: ~97 % done, 2 % failed, held and running runs among them), and ``--days`` of pass
statistics: every minute, each of ``--jobs`` jobs x 2 outcomes (completed and
retrying), so 30 days x 5 jobs is 432 000 rows, as a busy site's workers
would have flushed them (O1), and their half-hours (14 400 rows), summed
from them as migration 0010 sums them (the flush writes both; the day and
week read the half-hours). ``--runs 0 --days 0`` times the page on an
empty site, which must be as fast (O4). After VACUUM ANALYZE it times the overview
(``/admin/leasejobs/pausedqueue/overview/``) for the hour, the day and the
week, logged in as a superuser through ``django.test.Client``: one warm-up,
then ``--repeat`` GETs each, reported as min / median / max. Each window is
requested once more with its SQL captured, to count the statements and to
EXPLAIN the slowest one. The page must show the window's passes (its chart's
total equals the statistics' sum over the window).

It exits with status 1 when a window's median exceeds ``--limit-ms`` or a
page does not show what it should. The process layout is ``admin_list.py``'s
(the parent never imports Django's ORM; it re-runs this script as a child
with ``DATABASE_URL`` and ``DJANGO_SETTINGS_MODULE=benchmarks.admin_settings``),
and the report goes to ``benchmarks/results/overview-page-<date>.md``.
"""

from __future__ import annotations

import argparse
import datetime
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
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The million runs are admin_list.py's, built the same way, so the two benchmarks read alike.
from benchmarks.admin_list import JOB_NAMES, explain, log, one_line, register_jobs, seed  # noqa: E402
from benchmarks.drain import (  # noqa: E402
    DB_NAME,
    fresh_database,
    machine_info,
    setup_database,
    write_results,
)

CHILD_TIMEOUT = 3600
OVERVIEW = "/admin/leasejobs/pausedqueue/overview/"
WINDOWS = ("hour", "day", "week")

PG_STATS = """
INSERT INTO leasejobs_passstat (
    minute, job, queue, outcome, count, total_seconds, max_seconds,
    le_00, le_01, le_02, le_03, le_04, le_05, le_06, le_07, le_08, le_09, le_10, le_11, le_12, le_13
)
SELECT
    %(since)s::timestamptz + m * interval '1 minute',
    (%(jobs)s::text[])[j],
    'default',
    o,
    passes,
    passes * 0.04,
    0.9,
    0, 0, 0, passes - 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0
FROM (
    SELECT m, j, o,
        CASE o WHEN 'completed' THEN 20 + mod(m * j, 17) ELSE 1 + mod(m + j, 2) END AS passes
    FROM generate_series(0, %(minutes)s - 1) AS m,
         generate_series(1, %(n_jobs)s) AS j,
         unnest(ARRAY['completed', 'retrying']) AS o
) AS grid
"""


def seed_runs(runs: int) -> dict[str, Any]:
    """admin_list.seed's *runs*, or none at all (an empty site)."""
    from django.db import connection

    from benchmarks.admin_list import table_size

    if not runs:
        return {"insert_s": 0.0, "counts": {}, "size": table_size()}
    with connection.cursor() as cursor:
        # admin_list.seed's INSERT predates the idle_passes column (issue 18), which has no
        # database default: give it one for the seed, as the ORM would write 0.
        cursor.execute("ALTER TABLE leasejobs_run ALTER COLUMN idle_passes SET DEFAULT 0")
    seeded = seed(runs)
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE leasejobs_run ALTER COLUMN idle_passes DROP DEFAULT")
    return seeded


def seed_statistics(days: int, n_jobs: int) -> dict[str, Any]:
    from django.db import connection

    from django_leasejobs.models import PassStat, PassStatHalfHour
    from django_leasejobs.store.rollup import roll_up

    minutes = days * 24 * 60
    jobs = JOB_NAMES[:n_jobs]
    now = datetime.datetime.now(datetime.UTC).replace(second=0, microsecond=0)
    since = now - datetime.timedelta(minutes=minutes - 1)  # the last row is this minute's
    began = time.monotonic()
    with connection.cursor() as cursor:
        params = {"since": since, "jobs": list(jobs), "minutes": minutes, "n_jobs": n_jobs}
        if minutes:
            cursor.execute(PG_STATS, params)
    halves = roll_up(PassStat, PassStatHalfHour, "default")  # what the flush would have added
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE leasejobs_passstat")
        cursor.execute("VACUUM ANALYZE leasejobs_passstathalfhour")
    count = PassStat.objects.count()
    if count != minutes * n_jobs * 2:
        raise RuntimeError(f"{count} statistics rows, expected {minutes * n_jobs * 2}")
    return {"rows": count, "half_hour_rows": halves, "insert_s": time.monotonic() - began}


def expected_total(key: str) -> int:
    """The passes of the window the page shows, summed straight from the table."""
    from django.db.models import Sum

    from django_leasejobs.admin.overview import SPANS, bounds
    from django_leasejobs.clock import get_clock
    from django_leasejobs.models import PassStat

    since, until = bounds(get_clock().now("default"), SPANS[key])
    window = PassStat.objects.filter(minute__gte=since, minute__lt=until)
    return int(window.aggregate(n=Sum("count"))["n"] or 0)


def measure(client: Any, key: str, repeat: int) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    url = f"{OVERVIEW}?window={key}"
    problems = []

    def get() -> Any:
        response = client.get(url)
        if response.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {response.status_code}")
        return response

    get()  # warm-up: templates compiled, the connection's statements planned
    timings = []
    for _ in range(repeat):
        began = time.perf_counter()
        get()
        timings.append((time.perf_counter() - began) * 1000)
    expected = expected_total(key)
    with CaptureQueriesContext(connection) as captured:
        page = get().content.decode()
    shown = re.search(r'id="leasejobs-passes-chart"[^>]*data-total="(\d+)"', page)
    if shown is None or int(shown.group(1)) != expected:
        problems.append(f"{key}: the chart shows {shown and shown.group(1)} passes, not {expected}")
    if "leasejobs-unreadable" in page or "cannot be read" in page:
        problems.append(f"{key}: the page reports unreadable figures")
    queries = [{"sql": q["sql"], "ms": float(q["time"]) * 1000} for q in captured.captured_queries]
    # Of the statements EXPLAIN can read: on an empty site a COMMIT can take the longest.
    slowest = max(
        (q for q in queries if q["sql"].lstrip().upper().startswith(("SELECT", "WITH"))),
        key=lambda q: q["ms"],
    )
    return {
        "window": key,
        "min_ms": min(timings),
        "median_ms": statistics.median(timings),
        "max_ms": max(timings),
        "statements": len(queries),
        "all": queries,
        "slowest": {**slowest, "plan": explain(slowest["sql"])},
        "passes": expected,
        "problems": problems,
    }


def child(args: argparse.Namespace) -> None:
    server = setup_database()["server"]  # django.setup() and migrate, as in drain.py
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    if connection.vendor != "postgresql":
        raise SystemExit("the overview benchmark runs on PostgreSQL (SPEC §16 O4)")
    register_jobs()
    log(f"{server}: inserting {args.runs:,} runs")
    seeded = seed_runs(args.runs)
    log(f"inserted in {seeded['insert_s']:.1f} s; now {args.days} days of statistics")
    stats = seed_statistics(args.days, args.jobs)
    log(
        f"{stats['rows']:,} statistics rows and {stats['half_hour_rows']:,} half-hours "
        f"in {stats['insert_s']:.1f} s; VACUUM ANALYZE"
    )
    with connection.cursor() as cursor:
        # As autovacuum would long have left a month of statistics: hint bits set, the
        # visibility map built; and the load written out, so no checkpoint of it runs
        # while the pages are timed.
        cursor.execute("VACUUM ANALYZE leasejobs_passstat")
        cursor.execute("VACUUM ANALYZE leasejobs_passstathalfhour")
        cursor.execute("CHECKPOINT")
    user = get_user_model().objects.create_superuser("bench", "bench@example.invalid", None)
    client = Client()
    client.force_login(user)
    measured = []
    for key in WINDOWS:
        measured.append(measure(client, key, args.repeat))
        log(f"{key}: median {measured[-1]['median_ms']:.1f} ms")
    result = {"server": server, "seed": seeded, "stats": stats, "windows": measured}
    Path(args.result).write_text(json.dumps(result))


# -- the parent ------------------------------------------------------------------------------


def run_child(url: str, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    result = tmp / "result.json"
    result.unlink(missing_ok=True)
    command = [sys.executable, __file__, "--child", "--result", str(result)]
    for option in ("runs", "days", "jobs", "repeat"):
        command += [f"--{option}", str(getattr(args, option))]
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "benchmarks.admin_settings"}
    done = subprocess.run(command, env=env, cwd=ROOT, check=False, timeout=CHILD_TIMEOUT)
    if done.returncode != 0 or not result.exists():
        raise SystemExit(f"FAIL: child exited with status {done.returncode}")
    return json.loads(result.read_text())


def describe(database: str, result: dict[str, Any], limit_ms: float) -> tuple[list[str], list[str]]:
    seeded, stats = result["seed"], result["stats"]
    problems = [problem for window in result["windows"] for problem in window["problems"]]
    lines = [
        f"## {database}: {result['server']}",
        "",
        f"{sum(seeded['counts'].values()):,} runs ({seeded['size']}) and "
        f"{stats['rows']:,} statistics rows ({stats.get('half_hour_rows', 0):,} half-hours).",
        "",
        "| window | passes shown | min ms | median ms | max ms | statements "
        "| slowest statement ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for window in result["windows"]:
        lines.append(
            f"| {window['window']} | {window['passes']:,} | {window['min_ms']:.1f} "
            f"| {window['median_ms']:.1f} | {window['max_ms']:.1f} | {window['statements']} "
            f"| {window['slowest']['ms']:.2f} |"
        )
        if window["median_ms"] > limit_ms:
            problems.append(
                f"{window['window']}: median {window['median_ms']:.0f} ms > {limit_ms:.0f} ms; "
                f"slowest statement: {one_line(window['slowest']['sql'])}"
            )
    lines.append("")
    for window in result["windows"]:
        lines += [
            f"**{window['window']}**: {window['statements']} statements",
            "",
            *(f"- {q['ms']:.2f} ms: `{one_line(q['sql'], 140)}`" for q in window["all"]),
            "",
            f"Slowest, {window['slowest']['ms']:.2f} ms:",
            "",
            "```sql",
            window["slowest"]["sql"],
            "```",
            "",
            "```",
            window["slowest"]["plan"],
            "```",
            "",
        ]
    return lines, [f"{database}: {problem}" for problem in problems]


def main(args: argparse.Namespace) -> int:
    began = time.monotonic()
    servers: dict[str, str] = {}
    sections: list[str] = []
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="leasejobs-overview-") as tmp_name:
        for database in ("postgres",):
            print(f"{database}: fresh database", flush=True)
            url = fresh_database(database, Path(tmp_name), args.database)
            result = run_child(url, Path(tmp_name), args)
            servers[database] = result["server"]
            section, failed = describe(database, result, args.limit_ms)
            sections += section
            problems += failed
    command = "python benchmarks/overview_page.py " + " ".join(sys.argv[1:])
    report = [
        f"# Overview page benchmark, {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}",
        "",
        f"`{command.strip()}` (took {time.monotonic() - began:.0f} s)",
        "",
        *machine_info(servers),
        "",
        f"Each window: `django.test.Client` logged in as a superuser, one warm-up GET, then "
        f"{args.repeat} GETs (whole request: middleware, session, template), min / median / "
        f"max; the statements come from one more GET under `CaptureQueriesContext`. Limit: "
        f"{args.limit_ms:.0f} ms median per window (SPEC §16 O4).",
        "",
        *sections,
        *(f"FAIL: {problem}" for problem in problems),
        "" if problems else "Every window within the limit, showing its passes.",
        "",
    ]
    text = "\n".join(report)
    print()
    print(text)
    write_results("overview-page", text)
    return 1 if problems else 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs", type=int, default=1_000_000, help="retained runs (default 1000000)"
    )
    parser.add_argument("--days", type=int, default=30, help="days of statistics (default 30)")
    parser.add_argument("--jobs", type=int, default=5, help="jobs with statistics (default 5)")
    parser.add_argument("--repeat", type=int, default=20, help="timed GETs per window (default 20)")
    parser.add_argument(
        "--limit-ms", type=float, default=300, help="largest median per window (default 300)"
    )
    parser.add_argument(
        "--database",
        default=DB_NAME,
        help="the PostgreSQL database to create, dropped first (default %(default)s)",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if 0 < args.runs < 10_000:  # admin_list.seed's mix needs as many
        parser.error("--runs must be 0 (an empty site) or at least 10000")
    if not 1 <= args.jobs <= len(JOB_NAMES):
        parser.error(f"--jobs must be from 1 to {len(JOB_NAMES)}")
    if args.days < 0 or args.repeat < 1:
        parser.error("--days must be at least 0 and --repeat at least 1")
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", args.database):
        parser.error("--database must be a plain lowercase name")
    return args


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.child:
        child(arguments)
    else:
        sys.exit(main(arguments))
