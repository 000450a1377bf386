"""Soak benchmark: does a long-lived worker loop keep its memory flat?

    python benchmarks/soak.py [--passes 20000] [--debug both|off|on]
                              [--databases sqlite postgres [mariadb]] [--tracemalloc]

For each database and DEBUG setting, one ``Worker`` (what ``manage.py
rundueJobs --loop`` runs) drives ``bench.noop`` runs in-process, one
``turn()`` after another (a drive, then what the LISTEN connection heard
meanwhile, on PostgreSQL), while the loop keeps ~500 due runs topped up
between drives, until ``--passes`` passes have completed. RSS (``VmRSS``) is
read after the first 1 000 passes (the baseline: imports, connection and
caches are warm by then) and every 1 000 passes after it. The verdict is PASS
when the final and the largest sample are within 10 % above the baseline.

Finished runs are deleted every 5 000 passes, so a growing table (and the
SQLite page cache, which lives in this process) does not pass for a leak.

Process layout as in ``drain.py``: Django reads its settings once per process,
so this script re-executes itself as a child per (database, DEBUG) with
``DATABASE_URL`` set, on a freshly created database; the child writes its
samples to a JSON file for the parent, which never imports Django's ORM.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, only benchmarks/ is on sys.path; the settings module, the
# package under test and drain.py's helpers are imported from the repository root.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The database set-up and the machine description must match drain.py's exactly,
# so they are imported rather than copied.
from benchmarks.drain import fresh_database, machine_info, setup_database  # noqa: E402

JOB = "bench.noop"
BACKLOG = 500  # due runs kept waiting, so every drive finds a full DRIVE_LIMIT
DRIVE_LIMIT = 100
SAMPLE_EVERY = 1000  # passes between RSS samples; the first sample is the baseline
PURGE_EVERY = 5000  # passes between deletions of finished runs
TOLERANCE = 0.10  # allowed growth of the final and the largest sample over the baseline
# A drive that completes nothing for this long means the loop is stuck (runs not
# due, a lost lease), not slow; fail instead of spinning forever.
STALL_TIMEOUT = 120
TRACEMALLOC_FRAMES = 25
TRACEMALLOC_TOP = 15
RESULTS_DIR = Path(__file__).resolve().parent / "results"
DEBUG_VARIANTS = {"off": [False], "on": [True], "both": [False, True]}


# -- the parent ----------------------------------------------------------------------


def run_child(url: str, tmp: Path, args: argparse.Namespace, debug: bool) -> dict[str, Any] | None:
    """Soak *url* in a child process; return its JSON result, None if it failed."""
    result = tmp / "result-soak.json"
    result.unlink(missing_ok=True)
    command = [
        sys.executable,
        __file__,
        "--child",
        "--result",
        str(result),
        "--passes",
        str(args.passes),
        "--debug",
        "on" if debug else "off",
    ]
    if args.tracemalloc:
        command.append("--tracemalloc")
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "benchmarks.settings"}
    # Output is not captured: the child's progress lines are the only sign of
    # life during a run of several minutes.
    done = subprocess.run(command, env=env, cwd=ROOT, check=False)
    if done.returncode != 0 or not result.exists():
        return None  # its traceback is on the terminal already
    return json.loads(result.read_text())


def mib(kib: float) -> str:
    return f"{kib / 1024:.1f}"


def verdict(result: dict[str, Any]) -> tuple[str, list[str]]:
    """PASS or FAIL for one soak, and the reasons for a FAIL."""
    reasons = list(result["failures"])
    baseline = result["samples"][0][1]
    rss = [kib for _passes, kib in result["samples"]]
    # Only growth counts: memory handed back to the OS is no leak.
    if rss[-1] > baseline * (1 + TOLERANCE):
        reasons.append(f"final RSS {mib(rss[-1])} MiB is over baseline {mib(baseline)} MiB + 10 %")
    if max(rss) > baseline * (1 + TOLERANCE):
        reasons.append(f"max RSS {mib(max(rss))} MiB is over baseline {mib(baseline)} MiB + 10 %")
    return ("FAIL" if reasons else "PASS"), reasons


def main(args: argparse.Namespace) -> int:
    began = time.monotonic()
    server_versions: dict[str, str] = {}
    rows: list[str] = []
    details: list[str] = []
    extra: list[str] = []
    failed = False
    with tempfile.TemporaryDirectory(prefix="leasejobs-soak-") as tmp_name:
        tmp = Path(tmp_name)
        for database in args.databases:
            for debug in DEBUG_VARIANTS[args.debug]:
                # A fresh database per variant: the second soak must not start
                # behind the first one's history.
                url = fresh_database(database, tmp)
                result = run_child(url, tmp, args, debug)
                flag = "True" if debug else "False"
                if result is None:
                    # The other soaks still report: one database's trouble is no
                    # reason to throw their minutes away.
                    failed = True
                    print(f"FAIL: {database} DEBUG={flag}: the soak process failed", flush=True)
                    rows.append(f"| {database} | {flag} | - | - | - | - | - | FAIL (crashed) |")
                    extra.append(f"- FAIL {database} DEBUG={flag}: the soak process failed")
                    continue
                server_versions[database] = result["server"]
                outcome, reasons = verdict(result)
                failed |= outcome == "FAIL"
                rss = [kib for _passes, kib in result["samples"]]
                baseline = rss[0]
                growth = (rss[-1] - baseline) / baseline * 100
                rows.append(
                    f"| {database} | {flag} | {result['passes']:,} | {mib(baseline)} "
                    f"| {mib(rss[-1])} | {mib(max(rss))} | {growth:+.1f} % | {outcome} |"
                )
                log = str(result["max_query_log"]) if debug else "-"
                listened = "yes" if result.get("listening") else "no (polls)"
                details.append(
                    f"| {database} | {flag} | {listened} | {result['seconds']:.0f} "
                    f"| {result['passes'] / result['seconds']:,.0f} | {result['purged']:,} "
                    f"| {log} | {len(result['outages'])} | {' '.join(mib(kib) for kib in rss)} |"
                )
                print(f"{database} DEBUG={flag}: {outcome}", flush=True)
                for reason in reasons:
                    print(f"FAIL: {database} DEBUG={flag}: {reason}", flush=True)
                    extra.append(f"- FAIL {database} DEBUG={flag}: {reason}")
                for note in result["notes"][:5]:
                    extra.append(f"- note {database} DEBUG={flag}: {note}")
                for outage in result["outages"][:5]:
                    extra.append(f"- database outage, {database} DEBUG={flag}: {outage}")
                if result["tracemalloc"]:
                    extra += [
                        "",
                        f"tracemalloc, {database} DEBUG={flag}: blocks allocated after the "
                        f"baseline and still alive at the end (the RSS above leaves out "
                        f"tracemalloc's own {result['tracemalloc_overhead']}):",
                        "",
                        "```",
                        *result["tracemalloc"],
                        "```",
                    ]

    elapsed = time.monotonic() - began
    command = "python benchmarks/soak.py " + " ".join(sys.argv[1:])
    now = datetime.datetime.now().astimezone()
    report = [
        f"## Soak run, {now:%Y-%m-%d %H:%M %Z}",
        "",
        f"`{command.strip()}` (took {elapsed:.0f} s)",
        "",
        *machine_info(server_versions),
        "",
        f"One in-process `Worker(interval=0, limit={DRIVE_LIMIT}, jobs=[{JOB!r}])` with its "
        f"LISTEN connection open (PostgreSQL), calling `turn()` -- a drive, then reading the "
        f"notifications that came meanwhile, as `rundueJobs --loop` does -- until the passes "
        f"completed, ~{BACKLOG} due no-op runs topped up with `start_many()` (which notifies) "
        f"between drives. Finished runs deleted every {PURGE_EVERY:,} passes so table growth "
        f"does not count. RSS = VmRSS after `gc.collect()`; baseline after the first "
        f"{SAMPLE_EVERY:,} passes; PASS when final and max are at most "
        f"{TOLERANCE:.0%} above it.",
        "",
        "| database | DEBUG | passes | RSS after 1 000 (MiB) | final (MiB) | max (MiB) "
        "| growth | verdict |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "| database | DEBUG | LISTEN | seconds | passes/s | done runs deleted "
        "| largest query log | outages | RSS every 1 000 passes (MiB) |",
        "|---|---|---|---|---|---|---|---|---|",
        *details,
        *(["", *extra] if extra else []),
        "",
    ]
    text = "\n".join(report)
    print()
    print(text)
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / f"soak-{datetime.date.today():%Y-%m-%d}.md"
    # Appended: a day's soak runs read as one file, and none overwrites another.
    heading = "" if path.exists() else f"# Soak benchmark, {datetime.date.today():%Y-%m-%d}\n\n"
    with path.open("a") as out:
        out.write(heading + text + "\n")
    print(f"Appended to {path.relative_to(ROOT)}")
    if failed:
        print("FAIL: see above")
        return 1
    return 0


# -- the child: one (database, DEBUG) soak ---------------------------------------


def rss_kib() -> int:
    """This process's resident set size in KiB."""
    # Collect first: cyclic garbage waiting for the next automatic collection
    # is not retained memory, and would only add noise to the samples.
    gc.collect()
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


class Feeder:
    """Keeps BACKLOG due runs of JOB waiting, and deletes finished ones."""

    def __init__(self) -> None:
        self.instances = itertools.count()  # live_key is unique: a new instance per run
        self.purged = 0

    def top_up(self) -> None:
        from django_leasejobs import start_many
        from django_leasejobs.models import Run
        from django_leasejobs.states import RunStatus

        missing = BACKLOG - Run.objects.filter(job=JOB, status=RunStatus.RUNNING).count()
        if missing <= 0:
            return
        # start_many, as an application would: due by the database's clock, and
        # on PostgreSQL a NOTIFY for the worker's LISTEN connection to read.
        start_many(JOB, [(str(next(self.instances)), None) for _ in range(missing)])

    def purge(self) -> None:
        from django.db import connection

        from django_leasejobs.models import Run
        from django_leasejobs.states import RunStatus

        # A raw DELETE: the ORM's delete() would first load every row (to cascade
        # to steps, which no-op runs never write), a burst of objects that could
        # itself raise the RSS high-water mark we are measuring.
        table = connection.ops.quote_name(Run._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM {table} WHERE job = %s AND status = %s", [JOB, RunStatus.DONE]
            )
            self.purged += cursor.rowcount

    def done_left(self) -> int:
        from django_leasejobs.models import Run
        from django_leasejobs.states import RunStatus

        return Run.objects.filter(job=JOB, status=RunStatus.DONE).count()


def tracemalloc_top() -> tuple[list[str], str]:
    """Stop tracing; return the largest allocation sites still alive, then the
    biggest one's traceback, and the memory tracemalloc itself used."""
    import tracemalloc

    snapshot = tracemalloc.take_snapshot()
    overhead = f"{tracemalloc.get_tracemalloc_memory() / 2**20:.1f} MiB"
    tracemalloc.stop()
    snapshot = snapshot.filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    lines = [str(stat) for stat in snapshot.statistics("lineno")[:TRACEMALLOC_TOP]]
    by_traceback = snapshot.statistics("traceback")
    if by_traceback:
        lines += ["", f"largest by traceback: {by_traceback[0]}"]
        lines += by_traceback[0].traceback.format(limit=TRACEMALLOC_FRAMES)
    return lines, overhead


def account(report: Any, completed: int, notes: list[str], outages: list[str]) -> int:
    """Note what one drive reported; return the passes it completed."""
    if report is None:  # the drive's due read failed; the worker logged why
        outages.append(f"after {completed} passes: the drive could not run")
        return 0
    if report.aborted:  # the connection went away mid-drive
        outages.append(f"after {completed} passes: drive aborted: {report.aborted}")
    # An aborted drive's own error note is the outage above, not a failed pass.
    notes += [f"error on {n.run_id}: {n.text}" for n in report.errors if n.text != report.aborted]
    notes += [f"warning on {n.run_id}: {n.text}" for n in report.warnings]
    return report.completed


def soak(passes: int, debug: bool, trace: bool) -> dict[str, Any]:
    import tracemalloc

    server = setup_database()["server"]  # django.setup() and migrate, as in drain.py
    from django.conf import settings
    from django.db import InterfaceError, OperationalError, connection

    from django_leasejobs.worker import Worker

    # Set at run time rather than in settings.py: the query log is checked per
    # cursor (settings.DEBUG), and drain.py's timings need DEBUG off.
    settings.DEBUG = debug
    # interval=0: a turn that finds nothing due does not wait. The LISTEN
    # connection is open, as under rundueJobs --loop (W2, PostgreSQL): each
    # turn reads what the feeder's starts notified.
    worker = Worker(interval=0, limit=DRIVE_LIMIT, jobs=[JOB])
    worker.listen()
    feeder = Feeder()
    samples: list[tuple[int, int]] = []
    notes: list[str] = []
    # The worker survives a database restart (another process on this machine
    # may do one, e.g. the chaos tests); so must its feeder. Outages are listed,
    # and do not fail the soak: memory is what it measures.
    outages: list[str] = []
    completed = 0
    max_query_log = 0
    next_sample, next_purge = SAMPLE_EVERY, PURGE_EVERY
    started = last_progress = time.monotonic()
    while completed < passes:
        try:
            feeder.top_up()
        except (OperationalError, InterfaceError) as exc:
            outages.append(f"after {completed} passes: top-up failed: {exc}".strip())
            time.sleep(1)  # then drive_once() drops the broken connection and reconnects
        done = account(worker.turn(), completed, notes, outages)
        completed += done
        if done:
            last_progress = time.monotonic()
        elif time.monotonic() - last_progress > STALL_TIMEOUT:
            raise TimeoutError(f"no pass completed for {STALL_TIMEOUT} s after {completed}")
        # What drive_once() leaves in the log: one drive's queries, if it resets it.
        max_query_log = max(max_query_log, len(connection.queries_log))
        if completed >= next_purge:
            try:
                feeder.purge()
                next_purge += PURGE_EVERY
            except (OperationalError, InterfaceError) as exc:  # retried after the next drive
                outages.append(f"after {completed} passes: purge failed: {exc}".strip())
        if completed >= next_sample:
            kib = rss_kib()
            if tracemalloc.is_tracing():  # its own bookkeeping is no growth of ours
                kib -= tracemalloc.get_tracemalloc_memory() // 1024
            samples.append((completed, kib))
            rate = completed / (time.monotonic() - started)
            print(
                f"  DEBUG={debug} {completed:>7,} passes  RSS {kib / 1024:7.1f} MiB"
                f"  ({rate:,.0f} passes/s, {len(outages)} outages)",
                flush=True,
            )
            next_sample += SAMPLE_EVERY
            if trace and len(samples) == 1:
                # Started at the baseline, tracemalloc sees only what is allocated
                # afterwards; what is still alive at the end is the growth.
                tracemalloc.start(TRACEMALLOC_FRAMES)
    seconds = time.monotonic() - started
    listening = worker.listening
    worker.close()

    top, overhead = tracemalloc_top() if trace else ([], "")
    return {
        "server": server,
        "passes": completed,
        "seconds": seconds,
        "samples": samples,
        "purged": feeder.purged,
        "max_query_log": max_query_log,
        "listening": listening,
        "notes": notes,
        "outages": outages,
        "failures": check(feeder, completed, notes),
        "tracemalloc": top,
        "tracemalloc_overhead": overhead,
    }


def check(feeder: Feeder, completed: int, notes: list[str]) -> list[str]:
    """What went wrong besides memory: a soak of failing passes would prove nothing."""
    failures = []
    # Exactly once: every completed pass finished one run, deleted or still in the table.
    finished = feeder.purged + feeder.done_left()
    if finished != completed:
        failures.append(f"{finished} runs done, but the worker completed {completed} passes")
    if notes:
        failures.append(f"{len(notes)} errors or warnings, e.g. {notes[0]}")
    return failures


def child(args: argparse.Namespace) -> None:
    result = soak(args.passes, args.debug == "on", args.tracemalloc)
    Path(args.result).write_text(json.dumps(result))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passes", type=int, default=20000, help="passes per soak (default 20000)")
    parser.add_argument(
        "--debug",
        choices=sorted(DEBUG_VARIANTS),
        default="both",
        help="settings.DEBUG for the soak: off, on, or both (default: both, one soak each)",
    )
    parser.add_argument(
        "--databases",
        nargs="+",
        choices=["sqlite", "postgres", "mariadb"],
        default=["sqlite", "postgres"],
        help="default: sqlite postgres",
    )
    parser.add_argument(
        "--tracemalloc",
        action="store_true",
        help="trace allocations from the baseline on and print where the survivors came "
        "from (slower; RSS samples leave out tracemalloc's own bookkeeping)",
    )
    # Internal: how the parent runs one soak (see the module docstring).
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    # The baseline is the sample at SAMPLE_EVERY passes, and a verdict needs a later one.
    if args.passes < 2 * SAMPLE_EVERY:
        parser.error(f"--passes must be at least {2 * SAMPLE_EVERY}")
    if args.child and args.debug == "both":
        parser.error("a child soaks one DEBUG setting")
    return args


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.child:
        child(arguments)
    else:
        sys.exit(main(arguments))
