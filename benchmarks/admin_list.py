"""Admin scale benchmark: is the run list fast with a million retained runs (SPEC §8 A1)?

    python benchmarks/admin_list.py [--runs 1000000] [--databases postgres [sqlite]]
                                    [--repeat 5] [--limit-ms 500]

For each database it creates a fresh database, migrates, inserts ``--runs``
runs (a realistic mix, see ``status_of``), runs ANALYZE, and then, logged in
as a superuser through ``django.test.Client``, times the run admin's pages
(median of ``--repeat`` requests after one warm-up). Each page is requested
once more with its SQL captured, to count the statements, to check that no
statement is an unbounded ``COUNT(*)`` over the run table, and to EXPLAIN the
slowest one. The default list's row query must be an index scan in ``-id``
order: no Seq Scan, no Sort.

It exits with status 1 when a page's median exceeds ``--limit-ms``, when an
unbounded count is found, when the default list's plan scans or sorts the
table, or when a page does not show what it should.

Process layout as in ``drain.py``: the parent never imports Django's ORM; it
prepares each database and re-runs this script as a child with
``DATABASE_URL`` and ``DJANGO_SETTINGS_MODULE=benchmarks.admin_settings``.
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
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, only benchmarks/ is on sys.path; the settings module, the
# package under test and drain.py's helpers are imported from the repository root.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The database set-up and the machine description must match drain.py's exactly,
# so the numbers of the benchmarks can be read side by side.
from benchmarks.drain import (  # noqa: E402
    fresh_database,
    machine_info,
    setup_database,
    write_results,
)

CHILD_TIMEOUT = 3600

#: A dozen jobs, registered in the child so the job filter lists them as a site would.
JOB_NAMES = (
    "reports.daily",
    "billing.invoices",
    "search.reindex",
    "mail.digest",
    "imports.catalog",
    "exports.warehouse",
    "cleanup.sessions",
    "sync.crm",
    "media.thumbnails",
    "audit.rollup",
    "payments.reconcile",
    "feeds.refresh",
)
RUNNING = 1_000  # live runs, all among the newest: a run is live for minutes, not weeks
HELD = 100  # spread over the whole history: a held run waits for a human, maybe for long
SPAN = datetime.timedelta(days=30)  # started_at spreads over the default RETENTION
SQLITE_BATCH = 10_000
PER_PAGE = 50  # RunAdmin.list_per_page; page 100 starts at offset 99 * 50
PAGE_NUMBER = 100
STEP_NAMES = ("fetch", "transform", "load", "notify", "archive")


# -- the data: one rule, written for PostgreSQL (SQL) and SQLite (Python) ------------------


def status_of(n: int, runs: int) -> str:
    """The status of run number *n* (1 = oldest); the SQL in PG_INSERT says the same.

    ~97 % done, 2 % failed (handler_failed), 0.5 % cancelled, HELD held and RUNNING running.
    """
    stride = runs // HELD
    if n > runs - 2 * RUNNING and n % 2 == 0:
        return "running"
    if n % stride == stride // 2:
        return "held"
    if n % 50 == 7:
        return "failed"
    if n % 200 == 13:
        return "cancelled"
    return "done"


def run_id(n: int) -> str:
    """Ids that sort like ULIDs (26 upper-case characters, in creation order)."""
    return f"{n:026X}"


# Every % is a placeholder (psycopg's pyformat), so arithmetic uses mod().
PG_INSERT = """
INSERT INTO leasejobs_run (
    id, job, instance, payload, status, cursor, counters, attempts, failure_code, last_error,
    started_at, updated_at, next_attempt_at, ended_at, lease_owner, lease_began_at,
    lease_holder, admission_misses, rerun_requested, rerun_payload, has_steps,
    progress_total, live_key, origin, queue, priority, result, limit_key, throttled_by,
    idle_passes
)
SELECT
    lpad(upper(to_hex(n)), 26, '0'),
    job,
    CASE WHEN live THEN 'live-' || n ELSE 'tenant-' || mod(n, 500) END,
    '{"tenant": ' || mod(n, 500) || '}',
    status,
    CASE WHEN live THEN '{"page": ' || mod(n, 20) || '}' END,
    '{"rows": ' || mod(n, 1000) || '}',
    CASE WHEN status = 'failed' THEN 3 ELSE 0 END,
    CASE status WHEN 'failed' THEN 'handler_failed' WHEN 'cancelled' THEN 'cancelled'
        WHEN 'held' THEN 'interrupted' ELSE '' END,
    CASE status WHEN 'failed' THEN %(failed_error)s WHEN 'held' THEN %(held_error)s ELSE '' END,
    started_at,
    started_at + took,
    CASE WHEN status = 'running' THEN started_at + took + interval '5 minutes' END,
    CASE WHEN NOT live THEN started_at + took END,
    CASE WHEN status = 'running' THEN lpad(upper(to_hex(n + 4294967296)), 26, '0') END,
    CASE WHEN status = 'running' THEN started_at END,
    CASE WHEN status = 'running'
        THEN 'worker-' || mod(n, 4) || ':' || (1000 + mod(n, 50)) || ':1700000000'
        ELSE '' END,
    NULL,
    false,
    NULL,
    false,
    CASE WHEN mod(n, 4) = 0 THEN 1000 END,
    CASE WHEN live THEN job || '|live-' || n END,
    'api',
    'default',
    0,
    CASE WHEN status = 'done' THEN '{"rows": ' || mod(n, 1000) || '}' END,
    NULL,
    '',
    0
FROM (
    SELECT n, job, status, status IN ('running', 'held') AS live, started_at, took
    FROM (
        SELECT
            n,
            (%(jobs)s::text[])[1 + mod(n, 12)] AS job,
            CASE
                WHEN n > %(live_from)s AND mod(n, 2) = 0 THEN 'running'
                WHEN mod(n, %(stride)s) = %(held_at)s THEN 'held'
                WHEN mod(n, 50) = 7 THEN 'failed'
                WHEN mod(n, 200) = 13 THEN 'cancelled'
                ELSE 'done'
            END AS status,
            %(base)s::timestamptz + n * %(seconds_per_run)s * interval '1 second' AS started_at,
            (1 + mod(n, 900)) * interval '1 second' AS took
        FROM generate_series(1, %(runs)s) AS n
    ) AS numbered
) AS described
"""

FAILED_ERROR = "RuntimeError: upstream answered 502 Bad Gateway"
HELD_ERROR = "Interrupted: the worker stopped during a pass of a job not safe to repeat"


def sqlite_rows(runs: int, base: datetime.datetime) -> Any:
    """The rows of PG_INSERT, in Python, for executemany."""
    seconds_per_run = SPAN.total_seconds() / runs
    # Django stores a SQLite datetime as str() of the naive UTC value; base is naive UTC.
    for n in range(1, runs + 1):
        status = status_of(n, runs)
        live = status in ("running", "held")
        running = status == "running"
        job = JOB_NAMES[n % 12]
        instance = f"live-{n}" if live else f"tenant-{n % 500}"
        started = base + datetime.timedelta(seconds=n * seconds_per_run)
        updated = started + datetime.timedelta(seconds=1 + n % 900)
        yield (
            run_id(n),
            job,
            instance,
            f'{{"tenant": {n % 500}}}',
            status,
            f'{{"page": {n % 20}}}' if live else None,
            f'{{"rows": {n % 1000}}}',
            3 if status == "failed" else 0,
            {"failed": "handler_failed", "cancelled": "cancelled", "held": "interrupted"}.get(
                status, ""
            ),
            {"failed": FAILED_ERROR, "held": HELD_ERROR}.get(status, ""),
            str(started),
            str(updated),
            str(updated + datetime.timedelta(minutes=5)) if running else None,
            None if live else str(updated),
            run_id(n + 4294967296) if running else None,
            str(started) if running else None,
            f"worker-{n % 4}:{1000 + n % 50}:1700000000" if running else "",
            None,
            0,
            None,
            0,
            1000 if n % 4 == 0 else None,
            f"{job}|{instance}" if live else None,
            "api",
            "default",
            0,
            f'{{"rows": {n % 1000}}}' if status == "done" else None,
            None,
            "",
            0,
        )


SQLITE_INSERT = (
    "INSERT INTO leasejobs_run (id, job, instance, payload, status, cursor, counters, attempts, "
    "failure_code, last_error, started_at, updated_at, next_attempt_at, ended_at, lease_owner, "
    "lease_began_at, lease_holder, admission_misses, rerun_requested, rerun_payload, has_steps, "
    "progress_total, live_key, origin, queue, priority, result, limit_key, throttled_by, "
    "idle_passes) VALUES (" + ", ".join(["%s"] * 30) + ")"
)


# -- the child: seed one database and measure its admin ------------------------------------


def log(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


def seed(runs: int) -> dict[str, Any]:
    from django.db import connection, transaction
    from django.db.models import Count

    from django_leasejobs.models import Run

    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    base = now - SPAN
    began = time.monotonic()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # One statement: generate_series builds the million rows inside the server.
            cursor.execute(
                PG_INSERT,
                {
                    "jobs": list(JOB_NAMES),
                    "live_from": runs - 2 * RUNNING,
                    "stride": runs // HELD,
                    "held_at": (runs // HELD) // 2,
                    "failed_error": FAILED_ERROR,
                    "held_error": HELD_ERROR,
                    "base": base,
                    "seconds_per_run": SPAN.total_seconds() / runs,
                    "runs": runs,
                },
            )
        else:
            rows = sqlite_rows(runs, base.replace(tzinfo=None))
            with transaction.atomic():  # one commit, not one per batch
                while batch := list(itertools.islice(rows, SQLITE_BATCH)):
                    cursor.executemany(SQLITE_INSERT, batch)
    inserted = time.monotonic() - began
    began = time.monotonic()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # VACUUM as well as ANALYZE: on a table this old autovacuum would have set
            # the visibility map, which lets the capped counts read the index alone.
            cursor.execute("VACUUM ANALYZE leasejobs_run")
        else:
            cursor.execute("ANALYZE")
    analyzed = time.monotonic() - began
    by_status = Run.objects.order_by().values_list("status").annotate(n=Count("pk"))
    counts = dict(by_status.values_list("status", "n"))
    if sum(counts.values()) != runs:
        raise RuntimeError(f"{sum(counts.values())} runs in the table, expected {runs}")
    return {"insert_s": inserted, "analyze_s": analyzed, "counts": counts, "size": table_size()}


def table_size() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT pg_size_pretty(pg_table_size('leasejobs_run')), "
                "pg_size_pretty(pg_indexes_size('leasejobs_run'))"
            )
            heap, indexes = cursor.fetchone()
            return f"table {heap}, indexes {indexes}"
        cursor.execute("PRAGMA page_count")
        pages = cursor.fetchone()[0]
        cursor.execute("PRAGMA page_size")
        size = pages * cursor.fetchone()[0]
        return f"database file {size / 2**20:,.0f} MiB"


def newest(runs: int, wanted: Any) -> int:
    """The largest run number for which *wanted(n)* holds: the first row of a filtered list."""
    return next(n for n in range(runs, 0, -1) if wanted(n))


def add_steps(n: int) -> None:
    """Give the change page's run a step ledger, so its inline has rows to render."""
    from django.utils import timezone

    from django_leasejobs.models import Run, Step

    now = timezone.now()
    Step.objects.bulk_create(
        Step(
            run_id=run_id(n),
            name=name,
            result=None if i == len(STEP_NAMES) - 1 else f'{{"done": {i}}}',
            attempts=3 if i == len(STEP_NAMES) - 1 else 1,
            last_error=FAILED_ERROR if i == len(STEP_NAMES) - 1 else "",
            recorded_at=now,
        )
        for i, name in enumerate(STEP_NAMES)
    )
    Run.objects.filter(pk=run_id(n)).update(has_steps=True)


def register_jobs() -> None:
    """Register the dozen jobs, so the job filter lists the names the runs carry."""
    from django_leasejobs import job

    def handler(p: Any) -> Any:
        return p.done()

    for name in JOB_NAMES:
        job(name)(handler)


def pages(runs: int) -> list[dict[str, Any]]:
    """The pages to time, each with what it must show and what it must not.

    A filtered list must show the newest matching run and must not show the
    newest run of all (when that one does not match): a filter that stopped
    filtering, or a search that found nothing, fails the check.
    """
    from django.urls import reverse

    changelist = reverse("admin:leasejobs_run_changelist")
    job = JOB_NAMES[5]
    searched = next(n for n in range(runs // 3, runs) if status_of(n, runs) == "done")
    detail = next(n for n in range(runs // 2, runs) if status_of(n, runs) == "failed")
    add_steps(detail)
    # Row 1 of page P, newest first, is run number runs - (P - 1) * PER_PAGE.
    first_of_page = runs - (PAGE_NUMBER - 1) * PER_PAGE
    listed = [
        ("run list (newest first)", {}, lambda n: True),
        ("status = failed", {"status__exact": "failed"}, lambda n: status_of(n, runs) == "failed"),
        ("held = yes", {"held": "yes"}, lambda n: status_of(n, runs) == "held"),
        (f"job = {job}", {"job": job}, lambda n: JOB_NAMES[n % 12] == job),
        (
            "failure = handler_failed",
            {"failure_code__exact": "handler_failed"},
            lambda n: status_of(n, runs) == "failed",
        ),
        ("search: exact run id", {"q": run_id(searched)}, lambda n: n == searched),
        (f"page {PAGE_NUMBER}", {"p": PAGE_NUMBER}, lambda n: n <= first_of_page),
    ]
    result = [
        {
            "page": page,
            "url": f"{changelist}?{urlencode(query)}" if query else changelist,
            "shows": [run_id(newest(runs, matches))],
            "hides": [] if matches(runs) else [run_id(runs)],
        }
        for page, query, matches in listed
    ]
    result.append(
        {
            "page": "one run's change page",
            "url": reverse("admin:leasejobs_run_change", args=[run_id(detail)]),
            "shows": [run_id(detail), STEP_NAMES[-1]],  # the run and its step ledger
            "hides": [],
        }
    )
    return result


# Every COUNT over the run table must read a bounded number of rows.
RUN_TABLE = '"leasejobs_run"'
COUNT_RE = re.compile(r"\bCOUNT\s*\(", re.IGNORECASE)
# CappedCountPaginator: SELECT COUNT(*) ... FROM (SELECT ... LIMIT 10001) subquery
SUBQUERY_RE = re.compile(r"\bFROM\s*\((?P<inner>.*)\)\s*(?:AS\s+)?\"?\w+\"?\s*$", re.I | re.S)
LIMIT_AT_END_RE = re.compile(r"\bLIMIT\s+\d+(?:\s+OFFSET\s+\d+)?\s*$", re.I)
# The held-run count (A4): one range of leasejobs_run_status, as long as the live
# runs are many, whatever the history holds. Allowed, but its plan is checked.
LIVE_SET_RE = re.compile(
    r'FROM\s+"leasejobs_run"\s+WHERE\s+"leasejobs_run"\."status"\s*'
    r"(?:=\s*'(?:held|running)'|IN\s*\(\s*'(?:held|running)'(?:\s*,\s*'(?:held|running)')*\s*\))"
    r"\s*$",
    re.I,
)
# The list's row query: the run table, no count, one page.
ROWS_RE = re.compile(rf'FROM "leasejobs_run"\s.*\bLIMIT\s+{PER_PAGE}\b', re.S)
# Plan lines that read or sort the whole table instead of walking an index.
PG_BAD_NODE_RE = re.compile(
    r"^\s*(?:->\s+)?(?:(?:Parallel )?Seq Scan on|(?:Incremental )?Sort\s+\()", re.M
)
SQLITE_BAD_NODE_RE = re.compile(r"^\s*SCAN leasejobs_run\s*$|TEMP B-TREE", re.M)


def count_kind(sql: str) -> str | None:
    """``capped``, ``live-set`` or ``unbounded`` for a COUNT over the run table, else None."""
    if not COUNT_RE.search(sql) or RUN_TABLE not in sql:
        return None
    subquery = SUBQUERY_RE.search(sql)
    if subquery and LIMIT_AT_END_RE.search(subquery.group("inner").strip()):
        return "capped"
    if LIVE_SET_RE.search(sql.strip()):
        return "live-set"
    return "unbounded"


def explain(sql: str) -> str:
    """The plan of *sql*: executed on PostgreSQL (real row counts and timings)."""
    from django.db import connection

    with connection.cursor() as cursor:
        # No params: the captured SQL has them inlined, and a literal % must stay as it is.
        if connection.vendor == "postgresql":
            cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}")
            return "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}")
        return "\n".join(str(row[3]) for row in cursor.fetchall())


def scans_table(plan: str) -> bool:
    from django.db import connection

    bad = PG_BAD_NODE_RE if connection.vendor == "postgresql" else SQLITE_BAD_NODE_RE
    return bool(bad.search(plan))


def measure(client: Any, page: dict[str, Any], repeat: int) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    problems: list[str] = []

    def get() -> Any:
        response = client.get(page["url"])
        if response.status_code != 200:
            raise RuntimeError(f"{page['page']}: GET {page['url']} -> {response.status_code}")
        return response

    def check(response: Any) -> None:
        body = response.content.decode()
        problems.extend(
            f"{page['page']}: {shown!r} not on the page"
            for shown in page["shows"]
            if shown not in body
        )
        problems.extend(
            f"{page['page']}: {hidden!r} on the page, but it does not match"
            for hidden in page["hides"]
            if hidden in body
        )

    check(get())  # warm-up: compiled templates, cached lookups, a warm connection
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        get()
        times.append((time.perf_counter() - began) * 1000)
    # Captured apart from the timed requests: the debug cursor has a cost of its own.
    # CaptureQueriesContext gives the SQL with its parameters inlined (what EXPLAIN
    # needs) but times to the millisecond only; the wrapper times each statement finer.
    timings: list[float] = []

    def timed(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        began = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            timings.append((time.perf_counter() - began) * 1000)

    with CaptureQueriesContext(connection) as captured, connection.execute_wrapper(timed):
        check(get())
    if len(timings) != len(captured):
        raise RuntimeError(f"{len(timings)} timings for {len(captured)} statements")
    statements = [{"sql": q["sql"], "ms": ms} for q, ms in zip(captured, timings, strict=True)]
    counts = [{"kind": kind, "sql": s["sql"]} for s in statements if (kind := count_kind(s["sql"]))]
    problems += [
        f"{page['page']}: unbounded COUNT: {c['sql']}" for c in counts if c["kind"] == "unbounded"
    ]
    for live_set in {c["sql"] for c in counts if c["kind"] == "live-set"}:
        plan = explain(live_set)
        if scans_table(plan):
            problems.append(f"{page['page']}: the live-set COUNT scans the table:\n{plan}")
    slowest = max(statements, key=lambda s: s["ms"])
    return {
        "page": page["page"],
        "url": page["url"],
        "median_ms": statistics.median(times),
        "min_ms": min(times),
        "max_ms": max(times),
        "statements": len(statements),
        "all": statements,
        "counts": counts,
        "slowest": {**slowest, "plan": explain(slowest["sql"])},
        "rows_sql": next((s["sql"] for s in statements if is_row_query(s["sql"])), None),
        "problems": problems,
    }


def is_row_query(sql: str) -> bool:
    return (
        sql.lstrip().upper().startswith("SELECT")
        and not COUNT_RE.search(sql)
        and bool(ROWS_RE.search(sql))
    )


#: D7: due runs added after the history, spread over every priority and the last hour.
DUE = 10_000
#: Timed due reads: at least this many, since one takes under a millisecond (SPEC §13).
DUE_READS = 200


def due_read(repeat: int) -> dict[str, Any]:
    """The drive's snapshot (D1, D7) among the retained runs, with DUE runs due at once."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from django_leasejobs import driver
    from django_leasejobs.conf import conf
    from django_leasejobs.models import Run

    now = timezone.now()
    due = []
    for n in range(DUE):
        job, instance = JOB_NAMES[n % 12], f"due-{n}"
        at = now - datetime.timedelta(seconds=n % 3600)
        due.append(
            Run(
                id=f"Z{n:025d}",
                job=job,
                instance=instance,
                live_key=f"{job}|{instance}",
                priority=n % 201 - 100,
                started_at=at,
                updated_at=at,
                next_attempt_at=at,
            )
        )
    Run.objects.bulk_create(due, batch_size=1000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE leasejobs_run" if connection.vendor == "postgresql" else "ANALYZE")
    names = tuple(sorted(JOB_NAMES))
    timings = []
    for _ in range(repeat + 1):  # the first is a warm-up
        began = time.perf_counter()
        rows = driver.SNAPSHOT.rows("default", names, None, conf.SCAN_MAX)
        timings.append((time.perf_counter() - began) * 1000)
    with CaptureQueriesContext(connection) as captured:
        driver.SNAPSHOT.rows("default", names, None, conf.SCAN_MAX)
    (sql,) = [q["sql"] for q in captured.captured_queries]
    plan = explain(sql)
    priorities = list(
        Run.objects.filter(pk__in=[row[0] for row in rows]).values_list("priority", flat=True)
    )
    problems = []
    if scans_table(plan):
        problems.append("the due read scans or sorts the table (plan below)")
    if len(rows) != conf.SCAN_MAX or min(priorities) < 100 - (conf.SCAN_MAX // (DUE // 201)):
        problems.append(f"the due read did not return the {conf.SCAN_MAX} highest-priority runs")
    return {
        "due": DUE,
        "median_ms": statistics.median(timings[1:]),
        "min_ms": min(timings[1:]),
        "max_ms": max(timings[1:]),
        "returned": len(rows),
        "priorities": [max(priorities), min(priorities)],
        "sql": sql,
        "plan": plan,
        "problems": problems,
    }


def child(args: argparse.Namespace) -> None:
    server = setup_database()["server"]  # django.setup() and migrate, as in drain.py
    from django.contrib.auth import get_user_model
    from django.test import Client

    register_jobs()
    log(f"{server}: inserting {args.runs:,} runs")
    seeded = seed(args.runs)
    log(f"inserted in {seeded['insert_s']:.1f} s, analyzed in {seeded['analyze_s']:.1f} s")
    user = get_user_model().objects.create_superuser("bench", "bench@example.invalid", None)
    client = Client()
    client.force_login(user)
    measured = []
    for page in pages(args.runs):
        measured.append(measure(client, page, args.repeat))
        log(f"{page['page']}: median {measured[-1]['median_ms']:.1f} ms")
    default = measured[0]
    if default["rows_sql"] is None:
        raise RuntimeError("no row query captured for the default list")
    plan = explain(default["rows_sql"])
    due = due_read(max(args.repeat, DUE_READS))  # a read takes well under a millisecond
    log(f"due read among {due['due']:,} due runs: median {due['median_ms']:.2f} ms")
    problems = [p for m in measured for p in m["problems"]] + due["problems"]
    if scans_table(plan):
        problems.append("the default list's row query scans or sorts the table (plan below)")
    result = {
        "server": server,
        "seed": seeded,
        "pages": measured,
        "default_rows": {"sql": default["rows_sql"], "plan": plan},
        "due": due,
        "problems": problems,
    }
    Path(args.result).write_text(json.dumps(result))


# -- the parent ------------------------------------------------------------------------------


def run_child(url: str, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    result = tmp / "result.json"
    result.unlink(missing_ok=True)
    command = [sys.executable, __file__, "--child", "--result", str(result)]
    command += ["--runs", str(args.runs), "--repeat", str(args.repeat)]
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "benchmarks.admin_settings",
    }
    # Not captured: the child's progress lines are worth seeing during a long insert.
    done = subprocess.run(command, env=env, cwd=ROOT, check=False, timeout=CHILD_TIMEOUT)
    if done.returncode != 0 or not result.exists():
        raise SystemExit(f"FAIL: child exited with status {done.returncode}")
    return json.loads(result.read_text())


def one_line(sql: str, limit: int = 160) -> str:
    text = " ".join(sql.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def sql_and_plan(sql: str, plan: str) -> list[str]:
    """A statement and its plan, as two fenced blocks."""
    return ["```sql", sql, "```", "", "```", plan, "```", ""]


def describe(database: str, result: dict[str, Any], limit_ms: float) -> tuple[list[str], list[str]]:
    """The Markdown section of one database, and what failed in it."""
    seeded = result["seed"]
    order = ("done", "failed", "cancelled", "held", "running")
    mix = ", ".join(f"{status} {seeded['counts'].get(status, 0):,}" for status in order)
    analyze = "VACUUM ANALYZE" if database == "postgres" else "ANALYZE"
    problems = list(result["problems"])
    lines = [
        f"## {database}: {result['server']}",
        "",
        f"{sum(seeded['counts'].values()):,} runs ({mix}) inserted in {seeded['insert_s']:.1f} s, "
        f"{analyze} {seeded['analyze_s']:.1f} s; {seeded['size']}.",
        "",
        "| page | median ms | statements | min-max ms | slowest statement ms "
        "| COUNTs over leasejobs_run |",
        "|---|---:|---:|---|---:|---|",
    ]
    for page in result["pages"]:
        kinds = [c["kind"] for c in page["counts"]]
        counted = ", ".join(f"{kinds.count(k)} {k}" for k in dict.fromkeys(kinds)) or "none"
        lines.append(
            f"| {page['page']} | {page['median_ms']:.1f} | {page['statements']} "
            f"| {page['min_ms']:.1f}-{page['max_ms']:.1f} | {page['slowest']['ms']:.2f} "
            f"| {counted} |"
        )
        if page["median_ms"] > limit_ms:
            problems.append(
                f"{page['page']}: median {page['median_ms']:.0f} ms > {limit_ms:.0f} ms; slowest "
                f"statement ({page['slowest']['ms']:.0f} ms): {one_line(page['slowest']['sql'])}"
            )
    plan_kind = "EXPLAIN (ANALYZE, BUFFERS)" if database == "postgres" else "EXPLAIN QUERY PLAN"
    lines += [
        "",
        "COUNTs: *capped* = over a subquery with `LIMIT` (CappedCountPaginator: at most "
        "10 001 index entries); *live-set* = `WHERE status = 'held'` (the held-run count of "
        "A4), one range of `leasejobs_run_status` as long as the held runs, not the history "
        "(its plan is checked: no table scan). Any other COUNT over the table fails the run.",
        "",
        f"### Default list, row query ({plan_kind})",
        "",
        *sql_and_plan(result["default_rows"]["sql"], result["default_rows"]["plan"]),
        f"### The drive's due read (D1, D7) among them, with {result['due']['due']:,} runs due "
        "across priorities -100..100",
        "",
        f"Median {result['due']['median_ms']:.2f} ms ({result['due']['min_ms']:.2f}-"
        f"{result['due']['max_ms']:.2f}); {result['due']['returned']} keys returned, "
        f"priorities {result['due']['priorities'][0]} down to {result['due']['priorities'][1]}.",
        "",
        *sql_and_plan(result["due"]["sql"], result["due"]["plan"]),
        f"### Statements of each page; the slowest with its plan ({plan_kind})",
        "",
    ]
    for page in result["pages"]:
        lines += [
            f"**{page['page']}** (`{page['url']}`): {page['statements']} statements",
            "",
            *(f"- {s['ms']:.2f} ms: `{one_line(s['sql'], 140)}`" for s in page["all"]),
            "",
            f"Slowest, {page['slowest']['ms']:.2f} ms:",
            "",
            *sql_and_plan(page["slowest"]["sql"], page["slowest"]["plan"]),
        ]
    return lines, [f"{database}: {problem}" for problem in problems]


def main(args: argparse.Namespace) -> int:
    began = time.monotonic()
    servers: dict[str, str] = {}
    sections: list[str] = []
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="leasejobs-admin-") as tmp_name:
        tmp = Path(tmp_name)
        for database in args.databases:
            print(f"{database}: fresh database", flush=True)
            result = run_child(fresh_database(database, tmp), tmp, args)
            servers[database] = result["server"]
            section, failed = describe(database, result, args.limit_ms)
            sections += section
            problems += failed

    elapsed = time.monotonic() - began
    command = "python benchmarks/admin_list.py " + " ".join(sys.argv[1:])
    report = [
        f"# Admin list benchmark, {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}",
        "",
        f"`{command.strip()}` (took {elapsed:.0f} s)",
        "",
        *machine_info(servers),
        "",
        f"Each page: `django.test.Client` logged in as a superuser, one warm-up GET, then the "
        f"median of {args.repeat} GETs (whole request: middleware, session, template); the "
        f"statements come from one more GET under `CaptureQueriesContext`. Limit: "
        f"{args.limit_ms:.0f} ms per page.",
        "",
        *sections,
        *(f"FAIL: {problem}" for problem in problems),
        "" if problems else "All pages within the limit; no unbounded COUNT; index-ordered list.",
        "",
    ]
    text = "\n".join(report)
    print()
    print(text)
    write_results("admin-list", text)
    return 1 if problems else 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs", type=int, default=1_000_000, help="retained runs (default 1000000)"
    )
    parser.add_argument(
        "--databases",
        nargs="+",
        choices=["sqlite", "postgres"],
        default=["postgres"],
        help="default: postgres",
    )
    parser.add_argument("--repeat", type=int, default=5, help="timed GETs per page (default 5)")
    parser.add_argument(
        "--limit-ms", type=float, default=500, help="largest median per page (default 500)"
    )
    # Internal: how the parent runs the child (see the module docstring).
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    # Fewer runs than this and the held, failed and running runs would overlap.
    if args.runs < 10_000:
        parser.error("--runs must be at least 10000")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return args


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.child:
        child(arguments)
    else:
        sys.exit(main(arguments))
