"""Drain benchmark: how fast do worker processes empty a backlog of due runs?

    python benchmarks/drain.py [--runs 5000] [--workers 1 2] [--steps 10]
                               [--databases sqlite postgres [mariadb]]
                               [--concurrency 1 [4 ...]] [--io MS] [--cases noop steps]
                               [--prepare | --no-prepare] [--no-stats]
                               [--postgres-port 6432]

For each database and worker count it measures two cases (see README.md):

* no-op: ``--runs`` runs of ``bench.noop``, one pass each; reports passes/s
  and verifies exactly-once (every run done, counters ``{"calls": 1}``, and
  the workers' completed passes sum to the number of runs).
* steps: ``--runs / 10`` runs of ``bench.steps`` with ``--steps`` steps each;
  reports steps/s and verifies every run done.

``--concurrency N`` runs each worker process at ``run_due_jobs(concurrency=N)``
(W5: N passes at once on a pool of threads, kept across the worker's drives,
as ``rundueJobs --loop --concurrency N`` keeps it); several values measure
each in turn. ``--io MS`` makes the no-op handler block MS milliseconds after
it counts, as a call to a slow upstream would (the I/O-bound case of SPEC §13).
``--postgres-port 6432`` drives PostgreSQL through the transaction-pooling
PgBouncer ``.ci/pgbouncer start DIR`` runs there (SPEC §12).

Process layout. Django settings are read once per process, so this script
re-executes itself as a child per (database, case, workers) with
``DATABASE_URL`` set; that child inserts the backlog, starts the workers
(multiprocessing "spawn", each with its own connection, released together
through a barrier), then verifies the result and writes it to a JSON file
for the parent. The parent itself never imports Django's ORM.
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, only benchmarks/ is on sys.path; the settings module and the
# package under test are imported from the repository root.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DB_NAME = "leasejobs_bench"
SERVER_URLS = {
    "postgres": f"postgres://root@127.0.0.1:5432/{DB_NAME}",
    "mariadb": f"mysql://root@127.0.0.1:3306/{DB_NAME}",
}
JOBS = {"noop": "bench.noop", "steps": "bench.steps"}
DRIVE_LIMIT = 100
BARRIER_TIMEOUT = 120
# A lost worker leaves its claimed runs leased (5 minutes by default), so the
# others would wait that long; give up well after any sane drain instead.
CASE_TIMEOUT = 1800
RESULTS_DIR = Path(__file__).resolve().parent / "results"


# -- the parent ----------------------------------------------------------------------


def fresh_database(database: str, tmp: Path, name: str = DB_NAME) -> str:
    """Create an empty database for *database*; return its ``DATABASE_URL``.

    *name*: the PostgreSQL database's, for a benchmark run beside another's.
    """
    if database == "sqlite":
        path = tmp / "bench.sqlite3"
        for leftover in tmp.glob("bench.sqlite3*"):  # the file plus its -wal and -shm
            leftover.unlink()
        return f"sqlite:///{path}"
    if database == "postgres":
        import psycopg

        # CREATE/DROP DATABASE cannot run inside a transaction.
        with psycopg.connect("postgresql://root@127.0.0.1:5432/postgres", autocommit=True) as pg:
            pg.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            pg.execute(f"CREATE DATABASE {name}")
        return SERVER_URLS[database].removesuffix(DB_NAME) + name
    if database == "mariadb":
        import MySQLdb

        my = MySQLdb.connect(host="127.0.0.1", port=3306, user="root")
        try:
            cursor = my.cursor()
            cursor.execute(f"DROP DATABASE IF EXISTS {DB_NAME}")
            cursor.execute(f"CREATE DATABASE {DB_NAME} CHARACTER SET utf8mb4")
        finally:
            my.close()
        return SERVER_URLS[database]
    raise ValueError(database)


def run_child(url: str, action: str, tmp: Path, **options: int) -> dict[str, Any]:
    """Run this script as a child doing *action* against *url*; return its JSON result."""
    arguments = ["--child", action]
    for name, value in options.items():
        arguments += [f"--{name}", str(value)]
    return child_result(__file__, url, tmp / f"result-{action}.json", arguments)


def child_result(
    script: str, url: str, result: Path, arguments: list[str], *, quiet: bool = True
) -> dict[str, Any]:
    """Run *script* again against *url* with *arguments* and ``--result``; what it wrote there.

    Django reads its settings once per process, so a benchmark that creates its
    database first measures in a child started with ``DATABASE_URL`` set. The
    child's output is shown only when it fails, unless not *quiet*. Exits with
    ``FAIL:`` when the child fails.
    """
    result.unlink(missing_ok=True)
    command = [sys.executable, script, *arguments, "--result", str(result)]
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "benchmarks.settings"}
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=quiet, text=True, check=False)
    if done.returncode != 0 or not result.exists():
        if quiet:
            sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"FAIL: {Path(script).name}'s child exited with status {done.returncode}")
    return json.loads(result.read_text())


def write_results(kind: str, text: str) -> Path:
    """Write *text* to benchmarks/results/<kind>-<date>.md, never over an earlier run."""
    RESULTS_DIR.mkdir(exist_ok=True)
    stem = f"{kind}-{datetime.date.today():%Y-%m-%d}"
    path = RESULTS_DIR / f"{stem}.md"
    counter = 2
    while path.exists():
        path = RESULTS_DIR / f"{stem}-{counter}.md"
        counter += 1
    path.write_text(text)
    print(f"Written to {path.relative_to(ROOT)}")
    return path


def git(*args: str) -> str:
    """Output of a git command in the repository; empty if git is unavailable."""
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.stdout.strip()


def machine_info(server_versions: dict[str, str]) -> list[str]:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown",
    )
    # The package may be mid-change in the working tree; say so next to the numbers.
    commit = git("rev-parse", "--short", "HEAD")
    dirty = git("status", "--porcelain", "django_leasejobs")
    lines = [
        f"- nproc: {len(os.sched_getaffinity(0))} ({cpu})",
        f"- Python {platform.python_version()}, Django {version('Django')}, "
        f"{platform.system()} {platform.release()}",
        f"- django_leasejobs: {commit or 'unknown'}" + (" + uncommitted changes" if dirty else ""),
    ]
    lines += [f"- {name}: {server}" for name, server in server_versions.items()]
    if os.environ.get("LEASEJOBS_BENCH_PREPARE"):
        lines.append('- LEASEJOBS["PREPARE"] = True')
    return lines


def rate(result: dict[str, Any] | None, units: int) -> str:
    if result is None:
        return "-"
    if result["failures"]:
        return "FAIL"
    return f"{units / result['drain_s']:,.0f}"


def main(args: argparse.Namespace) -> int:
    began = time.monotonic()
    if args.prepare:
        os.environ["LEASEJOBS_BENCH_PREPARE"] = "1"  # every child reads it (benchmarks/settings.py)
    if args.no_prepare:
        os.environ["LEASEJOBS_BENCH_PREPARE"] = "0"
    if args.no_stats:
        os.environ["LEASEJOBS_BENCH_STATS"] = "0"  # the same: LEASEJOBS["STATS"] = False
    if args.io:
        os.environ["LEASEJOBS_BENCH_SLEEP_MS"] = str(args.io)  # benchmarks/jobs.py reads it
    steps_runs = max(1, args.runs // 10)
    server_versions: dict[str, str] = {}
    rows: list[str] = []
    details: list[str] = []
    failed = False
    with tempfile.TemporaryDirectory(prefix="leasejobs-bench-") as tmp_name:
        tmp = Path(tmp_name)
        for database in args.databases:
            url = fresh_database(database, tmp)
            if database == "postgres" and args.postgres_port != 5432:
                # Created on the server itself; driven through what listens there (a pooler).
                url = url.replace(":5432/", f":{args.postgres_port}/")
            server_versions[database] = run_child(url, "setup", tmp)["server"]
            for workers in args.workers:
                for concurrency in args.concurrency:
                    failed |= measure(args, url, tmp, database, workers, concurrency, rows, details)

    elapsed = time.monotonic() - began
    command = "python benchmarks/drain.py " + " ".join(sys.argv[1:])
    report = [
        f"# Drain benchmark, {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}",
        "",
        f"`{command.strip()}` (took {elapsed:.0f} s)",
        "",
        *machine_info(server_versions),
        "",
        f"no-op: {args.runs} runs of `bench.noop`; steps: {steps_runs} runs of `bench.steps` "
        f"with {args.steps} steps each. Drain time runs from the first handler start to the "
        f"last completed drive, over all workers; exactly-once verified.",
        "",
        *([f"I/O: every no-op handler blocks {args.io:g} ms.", ""] if args.io else []),
        "| database | workers | concurrency | runs | no-op passes/s | steps/s |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        "| database | case | workers | concurrency | runs | drain s | rate "
        "| completed per worker |",
        "|---|---|---|---|---|---|---|---|",
        *details,
        "",
    ]
    text = "\n".join(report)
    print()
    print(text)
    write_results("drain", text)
    if failed:
        print("FAIL: see above")
        return 1
    return 0


def measure(  # noqa: PLR0917 - the run's coordinates
    args: argparse.Namespace,
    url: str,
    tmp: Path,
    database: str,
    workers: int,
    concurrency: int,
    rows: list[str],
    details: list[str],
) -> bool:
    """Drain each case once with *workers* processes at *concurrency*; return whether one failed."""
    steps_runs = max(1, args.runs // 10)
    results: dict[str, dict[str, Any]] = {}
    failed = False
    for case, runs in (("noop", args.runs), ("steps", steps_runs)):
        if case not in args.cases:
            continue
        result = run_child(
            url, case, tmp, runs=runs, workers=workers, steps=args.steps, concurrency=concurrency
        )
        results[case] = result
        units = runs * (args.steps if case == "steps" else 1)
        unit = "steps" if case == "steps" else "passes"
        per_worker = " + ".join(str(n) for n in result["completed"])
        line = (
            f"{database} workers={workers} concurrency={concurrency} {case}: {runs} runs in "
            f"{result['drain_s']:.3f} s = {units / result['drain_s']:,.0f} {unit}/s "
            f"(completed per worker: {per_worker})"
        )
        print(line, flush=True)
        details.append(
            f"| {database} | {case} | {workers} | {concurrency} | {runs} "
            f"| {result['drain_s']:.3f} | {units / result['drain_s']:,.0f} {unit}/s "
            f"| {per_worker} |"
        )
        for note in result["notes"][:5]:
            print(f"  note: {note}")
        for failure in result["failures"]:
            print(f"FAIL: {database} workers={workers} {case}: {failure}", flush=True)
            failed = True
    rows.append(
        f"| {database} | {workers} | {concurrency} | {args.runs} "
        f"| {rate(results.get('noop'), args.runs)} "
        f"| {rate(results.get('steps'), steps_runs * args.steps)} |"
    )
    return failed


# -- the child: one (database, case, workers) ----------------------------------------


def setup_database() -> dict[str, Any]:
    import django
    from django.core.management import call_command
    from django.db import connection

    django.setup()
    call_command("migrate", verbosity=0)
    query = {
        "postgresql": "SHOW server_version",
        "mysql": "SELECT VERSION()",
        "sqlite": "SELECT 'SQLite ' || sqlite_version()",
    }[connection.vendor]
    with connection.cursor() as cursor:
        cursor.execute(query)
        server = str(cursor.fetchone()[0])
    if connection.vendor == "postgresql":
        server = f"PostgreSQL {server}"
    elif connection.vendor == "mysql":
        server = f"MySQL/MariaDB {server}"
    return {"server": server}


def insert_backlog(case: str, runs: int, steps: int) -> None:
    from datetime import timedelta

    from django.db import connection
    from django.utils import timezone

    from django_leasejobs.ids import new_id
    from django_leasejobs.models import Run, Step
    from django_leasejobs.querysets import live_key
    from django_leasejobs.states import RunStatus

    # Every case starts from empty tables, so no case drains behind the history
    # an earlier one left; a raw DELETE skips the ORM collecting 5 000 rows first.
    with connection.cursor() as cursor:
        for model in (Step, Run):
            cursor.execute(f"DELETE FROM {connection.ops.quote_name(model._meta.db_table)}")
    job = JOBS[case]
    payload = json.dumps({"steps": steps}) if case == "steps" else "null"
    # A second in the past, so every run is due by the database's clock too.
    due = timezone.now() - timedelta(seconds=1)
    Run.objects.bulk_create(
        [
            Run(
                id=new_id(),
                job=job,
                instance=str(i),
                payload=payload,
                status=RunStatus.RUNNING,
                started_at=due,
                updated_at=due,
                next_attempt_at=due,
                live_key=live_key(job, str(i)),
            )
            for i in range(runs)
        ],
        batch_size=500,
    )


def worker(job: str, concurrency: int, barrier: Any, results: Any) -> None:
    """One worker process: drive *job* until nothing of it is left running."""
    try:
        import django

        django.setup()
        from django.db import connection

        from benchmarks import jobs
        from django_leasejobs.dispatcher import Dispatcher
        from django_leasejobs.driver import run_due_jobs, wait_for_passes
        from django_leasejobs.models import Run
        from django_leasejobs.states import RunStatus

        connection.ensure_connection()  # Connect before the barrier, not on the clock.
        # W5: one pool for every drive, as a --loop worker keeps it.
        dispatcher = Dispatcher(concurrency) if concurrency > 1 else None
        barrier.wait(BARRIER_TIMEOUT)
        completed = 0
        last_finish: int | None = None
        notes: list[str] = []
        deadline = time.monotonic() + CASE_TIMEOUT
        while True:
            report = run_due_jobs(
                jobs=[job], limit=DRIVE_LIMIT, concurrency=concurrency, dispatcher=dispatcher
            )
            completed += report.completed
            if report.completed:
                last_finish = time.monotonic_ns()
            notes += [f"error on {n.run_id}: {n.text}" for n in report.errors]
            notes += [f"warning on {n.run_id}: {n.text}" for n in report.warnings]
            if report.attempted or (dispatcher is not None and dispatcher.dispatched):
                continue
            if dispatcher is not None and dispatcher.pool.busy:
                last = wait_for_passes(dispatcher)
                completed += last.completed
                if last.completed:
                    last_finish = time.monotonic_ns()
                continue
            # Nothing claimable: done, unless another worker still holds runs
            # (or one waits for a retry), in which case poll gently.
            if not Run.objects.filter(job=job, status=RunStatus.RUNNING).exists():
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"runs of {job} still running after {CASE_TIMEOUT} s")
            time.sleep(0.01)
        if dispatcher is not None:
            dispatcher.close()
        results.put(("ok", (jobs.first_handler_start_ns, completed, last_finish, notes)))
    except BaseException:
        results.put(("error", traceback.format_exc()))
    finally:
        from django.db import connections

        connections.close_all()


def drain(case: str, runs: int, workers: int, steps: int, concurrency: int) -> dict[str, Any]:
    import django

    django.setup()
    from django.db import connections

    from django_leasejobs.models import Run
    from django_leasejobs.states import RunStatus

    insert_backlog(case, runs, steps)
    connections.close_all()  # Hold nothing open while the workers drain.

    job = JOBS[case]
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(workers)
    queue = context.Queue()
    processes = [
        context.Process(target=worker, args=(job, concurrency, barrier, queue))
        for _ in range(workers)
    ]
    for process in processes:
        process.start()
    outcomes = [queue.get(timeout=CASE_TIMEOUT + BARRIER_TIMEOUT) for _ in processes]
    for process in processes:
        process.join(timeout=60)
    errors = [detail for status, detail in outcomes if status == "error"]
    if errors:
        raise RuntimeError("a worker process failed:\n" + "\n".join(errors))

    values = [detail for _status, detail in outcomes]
    starts = [start for start, _n, _finish, _notes in values if start is not None]
    finishes = [finish for _start, _n, finish, _notes in values if finish is not None]
    completed = [n for _start, n, _finish, _notes in values]
    notes = [note for *_rest, worker_notes in values for note in worker_notes]

    failures = []
    rows = list(Run.objects.filter(job=job).values_list("id", "status", "counters"))
    if len(rows) != runs:
        failures.append(f"{len(rows)} runs in the table, expected {runs}")
    not_done = [run_id for run_id, status, _counters in rows if status != RunStatus.DONE]
    if not_done:
        failures.append(f"{len(not_done)} runs not done, e.g. {not_done[:3]}")
    if case == "noop":
        miscounted = [
            (run_id, counters)
            for run_id, _status, counters in rows
            if json.loads(counters) != {"calls": 1}
        ]
        if miscounted:
            failures.append(
                f"{len(miscounted)} runs with counters != {{'calls': 1}}, e.g. {miscounted[:3]}"
            )
    if sum(completed) != runs:
        failures.append(f"workers completed {sum(completed)} passes in all, expected {runs}")
    if not starts or not finishes:
        raise RuntimeError("no handler ran: nothing to time")
    return {
        "drain_s": (max(finishes) - min(starts)) / 1e9,
        "completed": completed,
        "notes": notes,
        "failures": failures,
    }


def child(args: argparse.Namespace) -> None:
    if args.child == "setup":
        result = setup_database()
    else:
        result = drain(args.child, args.runs, args.workers[0], args.steps, args.concurrency[0])
    Path(args.result).write_text(json.dumps(result))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5000, help="no-op runs (default 5000)")
    parser.add_argument(
        "--workers", type=int, nargs="+", default=[1, 2], help="worker counts (default 1 2)"
    )
    parser.add_argument("--steps", type=int, default=10, help="steps per run (default 10)")
    parser.add_argument(
        "--databases",
        nargs="+",
        choices=["sqlite", "postgres", "mariadb"],
        default=["sqlite", "postgres"],
        help="default: sqlite postgres",
    )
    parser.add_argument(
        "--prepare", action="store_true", help='LEASEJOBS["PREPARE"] = True in every process'
    )
    parser.add_argument(
        "--no-prepare",
        action="store_true",
        help='LEASEJOBS["PREPARE"] = False in every process (default: the package\'s, None)',
    )
    parser.add_argument(
        "--no-stats",
        action="store_true",
        help='LEASEJOBS["STATS"] = False in every process: what O1\'s statistics cost (SPEC §16)',
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        default=[1],
        help="passes at once per worker process (W5); several values are measured in turn",
    )
    parser.add_argument(
        "--io",
        type=float,
        default=0.0,
        metavar="MS",
        help="the no-op handler blocks MS milliseconds after it counts (I/O-bound work)",
    )
    parser.add_argument(
        "--cases", nargs="+", choices=list(JOBS), default=list(JOBS), help="default: noop steps"
    )
    parser.add_argument(
        "--postgres-port",
        type=int,
        default=5432,
        metavar="PORT",
        help="drive PostgreSQL through PORT on 127.0.0.1 -- a PgBouncer's, .ci/pgbouncer's 6432 "
        "(the database is still created on the server's 5432; default: 5432, the server)",
    )
    # Internal: how the parent runs one child (see the module docstring).
    parser.add_argument("--child", choices=["setup", *JOBS], help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.runs < 1 or args.steps < 1 or min(args.workers) < 1 or min(args.concurrency) < 1:
        parser.error("--runs, --steps, --workers and --concurrency must be at least 1")
    return args


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.child:
        child(arguments)
    else:
        sys.exit(main(arguments))
