"""Soak benchmark: does a long-lived worker loop keep its memory and connections flat?

    python benchmarks/soak.py [--passes 20000] [--debug both|off|on]
                              [--databases sqlite postgres [mariadb]]
                              [--concurrency 1 [32 ...]] [--tracemalloc]

For each database, DEBUG setting and ``--concurrency`` value N, one ``Worker``
(what ``manage.py rundueJobs --loop --concurrency N`` runs) drives
``bench.noop`` runs in-process, one ``turn()`` after another (a drive, then
what the LISTEN connection heard meanwhile, on PostgreSQL), while the loop
keeps ~500 due runs topped up between drives, until ``--passes`` passes have
completed. With N > 1 the worker keeps one pool of N pass threads, each with
its own connection, across its drives (W5), as ``Worker.run()`` does. RSS
(``VmRSS``) is read after the first 1 000 passes (the baseline: imports,
connection, threads and caches are warm by then) and every 1 000 passes after
it. The memory verdict is PASS when the final and the largest sample are
within 10 % above the baseline; when N = 1 and some N > 1 are both measured
for a database and DEBUG setting, the largest sample at N must also be at most
1.5 times the largest at 1 (SPEC §13, revision 3).

The database connections this process holds are counted after every drive
(PostgreSQL and MariaDB; SQLite's are files, not counted): never more than
N + 2 -- the passes', the drive's own, the LISTEN one -- plus one per pass
running a heartbeat, which ``bench.noop`` does not (SPEC W5); and after the
worker's ``close()`` only the one the count itself runs on.

Finished runs are deleted every 5 000 passes, so a growing table (and the
SQLite page cache, which lives in this process) does not pass for a leak.

Process layout as in ``drain.py``: Django reads its settings once per process,
so this script re-executes itself as a child per (database, DEBUG, N) with
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
RSS_RATIO = 1.5  # the largest sample at --concurrency N over the largest at 1 (SPEC §13)
# The connections a worker process may hold (W5): its passes', the drive's own and
# the LISTEN one; plus one per pass running a heartbeat (L10), for a job that has one.
EXTRA_CONNECTIONS = 2
# A server-side count over the bound is read again after this pause: a backend whose
# client has just hung up (every drive reconnects, CONN_MAX_AGE = 0) leaves the
# server's list a moment later. The count of this process's own sockets is exact.
LINGER = 0.2
# A drive that completes nothing for this long means the loop is stuck (runs not
# due, a lost lease), not slow; fail instead of spinning forever.
STALL_TIMEOUT = 120
TRACEMALLOC_FRAMES = 25
TRACEMALLOC_TOP = 15
RESULTS_DIR = Path(__file__).resolve().parent / "results"
DEBUG_VARIANTS = {"off": [False], "on": [True], "both": [False, True]}


# -- the parent ----------------------------------------------------------------------


def run_child(
    url: str, tmp: Path, args: argparse.Namespace, debug: bool, concurrency: int
) -> dict[str, Any] | None:
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
        "--concurrency",
        str(concurrency),
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
    conns = result["connections"]
    if conns["counted"]:
        bound = conns["bound"]
        for side in ("server", "held"):
            if conns[f"{side}_max"] > bound:
                reasons.append(
                    f"{conns[f'{side}_max']} connections ({side}) at once, over N + "
                    f"{bound - result['concurrency']} = {bound}"
                )
            if conns[f"{side}_after_close"] < 0:
                reasons.append(f"the connections ({side}) could not be counted after close()")
            elif conns[f"{side}_after_close"] > 1:
                reasons.append(
                    f"{conns[f'{side}_after_close']} connections ({side}) still open after "
                    "the worker's close(), not only the one counting them"
                )
    elif conns["how"] != "n/a":  # countable here, but every count failed (an outage)
        reasons.append("the connections could not be counted once")
    return ("FAIL" if reasons else "PASS"), reasons


def connections_cell(result: dict[str, Any]) -> str:
    """The largest number of connections seen at once, and the bound (W5)."""
    conns = result["connections"]
    if not conns["counted"]:
        return "n/a"
    return f"{max(conns['server_max'], conns['held_max'])} (<= {conns['bound']})"


class Tables:
    """The report's tables, filled in soak by soak, and whether any soak failed."""

    def __init__(self) -> None:
        self.server_versions: dict[str, str] = {}
        self.rows: list[str] = []
        self.details: list[str] = []
        self.ratios: list[str] = []
        self.extra: list[str] = []
        self.failed = False

    def fail(self, name: str, reason: str) -> None:
        self.failed = True
        print(f"FAIL: {name}: {reason}", flush=True)
        self.extra.append(f"- FAIL {name}: {reason}")

    def crashed(self, database: str, flag: str, concurrency: int) -> None:
        # The other soaks still report: one database's trouble is no reason to
        # throw their minutes away.
        self.fail(f"{database} DEBUG={flag} concurrency={concurrency}", "the soak process failed")
        self.rows.append(
            f"| {database} | {flag} | {concurrency} | - | - | - | - | - | - | FAIL (crashed) |"
        )

    def add(self, database: str, flag: str, result: dict[str, Any]) -> int:
        """Report one soak; return its largest RSS sample."""
        concurrency = result["concurrency"]
        name = f"{database} DEBUG={flag} concurrency={concurrency}"
        self.server_versions[database] = result["server"]
        outcome, reasons = verdict(result)
        rss = [kib for _passes, kib in result["samples"]]
        baseline = rss[0]
        growth = (rss[-1] - baseline) / baseline * 100
        self.rows.append(
            f"| {database} | {flag} | {concurrency} | {result['passes']:,} "
            f"| {mib(baseline)} | {mib(rss[-1])} | {mib(max(rss))} "
            f"| {growth:+.1f} % | {connections_cell(result)} | {outcome} |"
        )
        conns = result["connections"]
        log = str(result["max_query_log"]) if flag == "True" else "-"
        listened = "yes" if result.get("listening") else "no (polls)"
        counts = (
            f"{conns['server_max']} / {conns['held_max']} "
            f"| {conns['server_after_close']} / {conns['held_after_close']} "
            f"| {conns['counted']:,}"
            if conns["counted"]
            else "n/a | n/a | 0"
        )
        self.details.append(
            f"| {database} | {flag} | {concurrency} | {listened} "
            f"| {result['seconds']:.0f} | {result['passes'] / result['seconds']:,.0f} "
            f"| {result['purged']:,} | {log} | {len(result['outages'])} | {counts} "
            f"| {' '.join(mib(kib) for kib in rss)} |"
        )
        print(f"{name}: {outcome}", flush=True)
        for reason in reasons:
            self.fail(name, reason)
        self.extra += [f"- note {name}: {note}" for note in result["notes"][:5]]
        self.extra += [f"- database outage, {name}: {outage}" for outage in result["outages"][:5]]
        if result["tracemalloc"]:
            self.extra += [
                "",
                f"tracemalloc, {name}: blocks allocated after the baseline and still alive "
                f"at the end (the RSS above leaves out tracemalloc's own "
                f"{result['tracemalloc_overhead']}):",
                "",
                "```",
                *result["tracemalloc"],
                "```",
            ]
        return max(rss)

    def compare(self, database: str, flag: str, max_rss: dict[int, int]) -> None:
        """The largest RSS at each N > 1 over the largest at N = 1 (SPEC §13: at most 1.5)."""
        if 1 not in max_rss:
            return
        for concurrency, kib in sorted(max_rss.items()):
            if concurrency == 1:
                continue
            ratio = kib / max_rss[1]
            outcome = "PASS" if ratio <= RSS_RATIO else "FAIL"
            self.ratios.append(
                f"| {database} | {flag} | {concurrency} | {mib(kib)} | {mib(max_rss[1])} "
                f"| {ratio:.2f} | {outcome} |"
            )
            if outcome == "FAIL":
                self.fail(
                    f"{database} DEBUG={flag}",
                    f"max RSS at concurrency {concurrency} is {ratio:.2f} x that at 1, "
                    f"over {RSS_RATIO}",
                )


def main(args: argparse.Namespace) -> int:
    began = time.monotonic()
    tables = Tables()
    with tempfile.TemporaryDirectory(prefix="leasejobs-soak-") as tmp_name:
        tmp = Path(tmp_name)
        for database in args.databases:
            for debug in DEBUG_VARIANTS[args.debug]:
                flag = "True" if debug else "False"
                max_rss: dict[int, int] = {}  # per concurrency, for the ratio to N = 1
                for concurrency in args.concurrency:
                    # A fresh database per soak: the next one must not start
                    # behind this one's history.
                    url = fresh_database(database, tmp)
                    result = run_child(url, tmp, args, debug, concurrency)
                    if result is None:
                        tables.crashed(database, flag, concurrency)
                    else:
                        max_rss[concurrency] = tables.add(database, flag, result)
                tables.compare(database, flag, max_rss)

    elapsed = time.monotonic() - began
    command = "python benchmarks/soak.py " + " ".join(sys.argv[1:])
    now = datetime.datetime.now().astimezone()
    report = [
        f"## Soak run, {now:%Y-%m-%d %H:%M %Z}",
        "",
        f"`{command.strip()}` (took {elapsed:.0f} s)",
        "",
        *machine_info(tables.server_versions),
        "",
        f"One in-process `Worker(interval=0, limit={DRIVE_LIMIT}, jobs=[{JOB!r}], "
        f"concurrency=N)` with its LISTEN connection open (PostgreSQL) and, for N > 1, one "
        f"pool of N pass threads kept across its drives, calling `turn()` -- a drive, then "
        f"reading the notifications that came meanwhile, as `rundueJobs --loop` does -- "
        f"until the passes completed, then `close()`; ~{BACKLOG} due no-op runs topped up "
        f"with `start_many()` (which notifies) between drives. Finished runs deleted every "
        f"{PURGE_EVERY:,} passes so table growth does not count. RSS = VmRSS after "
        f"`gc.collect()`; baseline after the first {SAMPLE_EVERY:,} passes; PASS when final "
        f"and max are at most {TOLERANCE:.0%} above it, and the connections held at once "
        f"(counted after every drive; server = the server's list, held = this process's "
        f"sockets) never exceed N + {EXTRA_CONNECTIONS}, with only the counting one left "
        f"after `close()`.",
        "",
        "| database | DEBUG | concurrency | passes | RSS after 1 000 (MiB) | final (MiB) "
        "| max (MiB) | growth | max connections | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *tables.rows,
        "",
        *(
            [
                f"Max RSS at concurrency N over max RSS at 1, same database and DEBUG "
                f"(PASS at most {RSS_RATIO}):",
                "",
                "| database | DEBUG | N | max RSS at N (MiB) | max RSS at 1 (MiB) | ratio "
                "| verdict |",
                "|---|---|---|---|---|---|---|",
                *tables.ratios,
                "",
            ]
            if tables.ratios
            else []
        ),
        "| database | DEBUG | concurrency | LISTEN | seconds | passes/s | done runs deleted "
        "| largest query log | outages | max connections server / held "
        "| after close server / held | counts | RSS every 1 000 passes (MiB) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *tables.details,
        *(["", *tables.extra] if tables.extra else []),
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
    if tables.failed:
        print("FAIL: see above")
        return 1
    return 0


# -- the child: one (database, DEBUG, concurrency) soak ---------------------------


def rss_kib() -> int:
    """This process's resident set size in KiB."""
    # Collect first: cyclic garbage waiting for the next automatic collection
    # is not retained memory, and would only add noise to the samples.
    gc.collect()
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def tag_connections() -> str | None:
    """Give every PostgreSQL connection this process opens an ``application_name`` of its own.

    Set in ``DATABASE_URL`` before ``django.setup()`` (django-environ turns the
    query into ``OPTIONS``), so the migration's connection, the drive's, the
    LISTEN one and each pool thread's all carry it, and ``pg_stat_activity``
    can tell this process's backends from everyone else's. Returns the name,
    or None on another database.
    """
    url = os.environ["DATABASE_URL"]
    if not url.startswith(("postgres://", "postgresql://")):
        return None
    name = f"leasejobs-soak-{os.getpid()}"
    os.environ["DATABASE_URL"] = f"{url}{'&' if '?' in url else '?'}application_name={name}"
    return name


def socket_ports(server_port: int) -> set[int]:
    """The local ports of this process's established TCP connections to *server_port*."""
    inodes = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed since the listing (by a pool thread, say)
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in (Path("/proc/self/net/tcp"), Path("/proc/self/net/tcp6")):
        if not table.exists():
            continue
        for line in table.read_text().splitlines()[1:]:
            fields = line.split()
            local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
            # State 01 is ESTABLISHED; the addresses are hex "address:port".
            if state == "01" and inode in inodes and int(remote.split(":")[1], 16) == server_port:
                ports.add(int(local.split(":")[1], 16))
    return ports


class Connections:
    """Counts the database connections this process holds (W5: at most N + 2).

    Two counts, both cheap enough for every drive, each run on (and counting)
    the drive's own connection. *server*: the server's list -- on PostgreSQL
    the ``pg_stat_activity`` rows with this process's ``application_name``
    (:func:`tag_connections`), on MariaDB the ``PROCESSLIST`` rows whose
    client port is one of this process's sockets. *held*: this process's TCP
    sockets to the server's port, exact at the moment they are read. SQLite's
    connections are files: not counted.
    """

    def __init__(self, application_name: str | None, concurrency: int) -> None:
        from django.db import connection

        from django_leasejobs.registry import get_job

        self.vendor = connection.vendor
        self.application_name = application_name
        self.port = int(connection.settings_dict.get("PORT") or 0)
        # W5: the passes' connections, the drive's own and the LISTEN one; plus one per
        # pass running a heartbeat (L10), if the job has one (bench.noop has not).
        heartbeats = concurrency if get_job(JOB).heartbeat else 0
        self.bound = concurrency + EXTRA_CONNECTIONS + heartbeats
        self.server_max = self.held_max = 0
        self.counted = 0  # counts taken; one that fails in an outage is skipped
        self.how = {
            "postgresql": "pg_stat_activity by application_name, and sockets",
            "mysql": "PROCESSLIST by client port, and sockets",
        }.get(self.vendor, "n/a")

    @property
    def countable(self) -> bool:
        return self.how != "n/a"

    def most(self) -> str:
        """The largest count so far, for the progress lines."""
        return str(max(self.server_max, self.held_max)) if self.countable else "n/a"

    def sample(self) -> None:
        """Count now, and keep the largest counts seen."""
        if not self.countable:
            return
        from django.db import DatabaseError

        try:
            server, held = self.count(self.bound)
        except DatabaseError:  # an outage: the soak lists it from the drive or feeder
            return
        self.counted += 1
        self.server_max = max(self.server_max, server)
        self.held_max = max(self.held_max, held)

    def count(self, bound: int) -> tuple[int, int]:
        """(server, held) now; a server count over *bound* is taken again after LINGER."""
        server, held = self._count()
        if server > bound:
            time.sleep(LINGER)  # a backend whose client just hung up may still be listed
            server, _held = self._count()
        return server, held

    def _count(self) -> tuple[int, int]:
        from django.db import connection

        with connection.cursor() as cursor:
            if self.vendor == "postgresql":
                cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                    [self.application_name],
                )
                server = int(cursor.fetchone()[0])
                ports = socket_ports(self.port)
            else:
                cursor.execute("SELECT host FROM information_schema.PROCESSLIST")
                hosts = [str(host) for (host,) in cursor.fetchall()]
                # Read after the query, while the drive's connection is surely open.
                ports = socket_ports(self.port)
                ours = {str(port) for port in ports}
                server = sum(host.rpartition(":")[2] in ours for host in hosts)  # "host:port"
        return server, len(ports)

    def result(self) -> dict[str, Any]:
        """The largest counts, and the count after the worker's close() (only this one left)."""
        after = (0, 0)
        if self.countable:
            from django.db import DatabaseError

            try:
                after = self.count(1)
            except DatabaseError:
                after = (-1, -1)  # unknown; the outage is listed
        return {
            "how": self.how,
            "bound": self.bound,
            "counted": self.counted,
            "server_max": self.server_max,
            "held_max": self.held_max,
            "server_after_close": after[0],
            "held_after_close": after[1],
        }


class LastReport:
    """The worker's latest drive report (its ``on_report``).

    Kept for the report ``Worker.close()`` makes of the passes still in flight
    when the loop ended (W5), which no ``turn()`` returned.
    """

    def __init__(self) -> None:
        self.report: Any = None

    def __call__(self, report: Any) -> None:
        self.report = report


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


def rss_sample() -> int:
    """RSS in KiB, less tracemalloc's own bookkeeping when it traces (no growth of ours)."""
    import tracemalloc

    kib = rss_kib()
    if tracemalloc.is_tracing():
        kib -= tracemalloc.get_tracemalloc_memory() // 1024
    return kib


def loop_worker(concurrency: int, on_report: LastReport) -> Any:
    """The ``Worker`` that ``rundueJobs --loop --concurrency N`` runs, ready for ``turn()``."""
    from django_leasejobs.worker import Worker

    # interval=0: a turn that finds nothing due does not wait.
    worker = Worker(
        interval=0, limit=DRIVE_LIMIT, jobs=[JOB], concurrency=concurrency, on_report=on_report
    )
    # What Worker.run() does before its loop, which this soak drives turn by turn
    # itself: the pool of N pass threads (and their connections) kept across the
    # drives (W5, §13), finished and closed by close(); and the LISTEN connection,
    # as under rundueJobs --loop (W2, PostgreSQL): each turn reads what the
    # feeder's starts notified.
    worker.open()
    return worker


def soak(
    passes: int, debug: bool, trace: bool, concurrency: int, application_name: str | None
) -> dict[str, Any]:
    import tracemalloc

    server = setup_database()["server"]  # django.setup() and migrate, as in drain.py
    from django.conf import settings
    from django.db import InterfaceError, OperationalError, connection

    # Set at run time rather than in settings.py: the query log is checked per
    # cursor (settings.DEBUG), and drain.py's timings need DEBUG off.
    settings.DEBUG = debug
    last = LastReport()
    worker = loop_worker(concurrency, last)
    conns = Connections(application_name, concurrency)
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
        # (Read before the count below adds its own, which the next drive resets.)
        max_query_log = max(max_query_log, len(connection.queries_log))
        conns.sample()  # after every drive: the pool's passes may still be running
        if completed >= next_purge:
            try:
                feeder.purge()
                next_purge += PURGE_EVERY
            except (OperationalError, InterfaceError) as exc:  # retried after the next drive
                outages.append(f"after {completed} passes: purge failed: {exc}".strip())
        if completed >= next_sample:
            samples.append((completed, rss_sample()))
            rate = completed / (time.monotonic() - started)
            print(
                f"  DEBUG={debug} concurrency={concurrency} {completed:>7,} passes"
                f"  RSS {samples[-1][1] / 1024:7.1f} MiB  connections max {conns.most()}"
                f"  ({rate:,.0f} passes/s, {len(outages)} outages)",
                flush=True,
            )
            next_sample += SAMPLE_EVERY
            if trace and len(samples) == 1:
                # Started at the baseline, tracemalloc sees only what is allocated
                # afterwards; what is still alive at the end is the growth.
                tracemalloc.start(TRACEMALLOC_FRAMES)
    listening = worker.listening
    # W5: the passes still in flight finish, are reported (to `last`), and the pool's
    # threads close their connections, as do the LISTEN one and the drive's own.
    last.report = None
    worker.close()
    if last.report is not None:
        completed += account(last.report, completed, notes, outages)
    seconds = time.monotonic() - started

    top, overhead = tracemalloc_top() if trace else ([], "")
    return {
        "server": server,
        "concurrency": concurrency,
        "passes": completed,
        "seconds": seconds,
        "samples": samples,
        "purged": feeder.purged,
        "max_query_log": max_query_log,
        "listening": listening,
        "connections": conns.result(),
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
    application_name = tag_connections()  # before soak() calls django.setup()
    result = soak(
        args.passes, args.debug == "on", args.tracemalloc, args.concurrency[0], application_name
    )
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
        "--concurrency",
        type=int,
        nargs="+",
        default=[1],
        help="passes at once in the worker (W5); several values are soaked in turn "
        "(default 1; e.g. 1 32 also compares their RSS)",
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
    if min(args.concurrency) < 1:
        parser.error("--concurrency must be at least 1")
    if args.child and (args.debug == "both" or len(args.concurrency) != 1):
        parser.error("a child soaks one DEBUG setting at one concurrency")
    return args


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.child:
        child(arguments)
    else:
        sys.exit(main(arguments))
