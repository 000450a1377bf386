"""Walk benchmark (SPEC §13, revision 4): a backfill through ``p.walk`` against a plain loop.

    python benchmarks/bench_walk.py [--rows 1000000] [--size 1000] [--rounds 2]
                                    [--database postgres] [--kill-every 30] [--modes time kill]

The table ``benchmarks_walkrow`` (``benchmarks/models.py``: an id and an
integer ``touched``) is filled with ``--rows`` rows. Every batch's work is the
same in both ways of walking it: one ``UPDATE`` setting ``touched = touched +
1`` on the batch's rows (``benchmarks.jobs.touch``), so afterwards each row's
``touched`` says how many batches did it.

``time`` mode, in one sitting:

* **plain**: the management-command loop a site would write by hand --
  ``filter(pk__gt=last).order_by("pk")[:size]``, the batch's ``UPDATE``, the
  last key kept in a variable, until a batch comes back short -- in autocommit;
* **walk**: one run of ``bench.walk``, whose handler returns
  ``p.walk(WalkRow.objects.all(), touch, size=size)``, driven in this process by
  ``run_due_jobs(jobs=["bench.walk"])`` until done: one pass a drive, as a
  ``rundueJobs`` worker drives with its defaults (``MAX_PASSES`` 1);
* **walk, one drive**: the same with ``run_due_jobs(max_passes=...)`` large enough
  that one drive takes the run from start to end (``rundueJobs --max-passes``);
* **floor**: the plain loop plus the two writes a walk that resumes after a
  crash and is fenced against a second worker cannot do without, each batch --
  the batch recorded as done, with the lease renewed (R5, L7), and then the
  cursor moved (R3), each one fenced ``UPDATE`` of a one-row progress table
  (``benchmarks.models.WalkProgress``) in its own commit. What ``p.walk`` costs
  over the floor is its own; what the floor costs over the plain loop is the
  price of resuming, whoever writes the loop.

A drive's own cost is the site's: the benchmark project registers one
minutely schedule (``bench.minutely_skip``), which every drive checks (S1, S6),
as a site's worker would; one pass a drive pays it per batch, one drive once.

One untimed plain loop first brings the table to the state every later walk
finds it in (freshly filled pages have no free space: a first walk moves every
row). Each round then times the four in turn, the order reversed every other round so
that drift on a noisy machine (and the dead tuples each walk leaves) weighs on
each alike; ``VACUUM ANALYZE`` and a ``CHECKPOINT`` run before each timing,
outside it. After each,
every row's ``touched`` must have gone up by exactly one. It prints the
seconds of each and the ratios of the walks' totals to the plain loop's; SPEC
§13's target is a walk within 1.05 times the plain loop.

``kill`` mode: a ``rundueJobs --loop --job bench.walk --max-passes 1000`` worker
(``python -m django``, this project's ``benchmarks.settings``; each batch's
commit claims and begins the next batch's pass) walks a fresh run over the
table and is SIGKILLed every ``--kill-every`` seconds, a new one started each
time, until the run is done. Then no row may be left untouched (none skipped),
and the rows touched twice may fill at most one batch per kill (a batch whose
``UPDATE`` committed before its step was recorded is done again by the
takeover, R5; one whose step was recorded is not).

The database (PostgreSQL ``leasejobs_bench``, as ``drain.py``'s) is dropped and
created again first. Settings are read once per process, so the script runs
itself again as a child with ``DATABASE_URL`` set, as ``drain.py`` does; the
worker processes of ``kill`` mode are that child's. Prints ``FAIL:`` and exits 1
when a check fails. SPEC §13 measures 1 000 000 rows; ``--rows 20000`` (with
``--kill-every 2``) is a quick check that it works.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

JOB = "bench.walk"
INSERT_CHUNK = 50_000


# -- the child: the database, the rows, the timings ---------------------------------------------


def setup(rows: int) -> str:
    """Migrate, create the walked table and fill it with *rows* rows; the server's version."""
    from django.core.management import call_command
    from django.db import connection

    from benchmarks.drain import setup_database
    from benchmarks.models import WalkRow

    server = setup_database()["server"]
    call_command("migrate", run_syncdb=True, verbosity=0)  # benchmarks/ has no migrations
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:  # one statement, whatever the row count
            cursor.execute(
                f"INSERT INTO {WalkRow._meta.db_table} (id, touched) "
                "SELECT n, 0 FROM generate_series(1, %s) AS n",
                [rows],
            )
    else:
        for first in range(1, rows + 1, INSERT_CHUNK):
            last = min(first + INSERT_CHUNK, rows + 1)
            WalkRow.objects.bulk_create([WalkRow(id=n) for n in range(first, last)])
    return server


def vacuum() -> None:
    """``VACUUM ANALYZE`` the walked table, then ``CHECKPOINT``: each walk starts alike.

    Alike in the table's shape, and in the write-ahead log's: the first change
    to each page after a checkpoint logs the whole page, so a walk timed just
    after one writes about twice the log of a walk timed late in the cycle --
    without the ``CHECKPOINT`` the same plain loop measured 12.5 s in one round
    and 23.1 s in another.
    """
    from django.db import connection

    from benchmarks.models import WalkRow

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:  # autocommit: VACUUM cannot run in a transaction
            cursor.execute(f"VACUUM ANALYZE {WalkRow._meta.db_table}")
            cursor.execute("CHECKPOINT")


def touched() -> dict[int, int]:
    """How many rows have each ``touched`` value."""
    from django.db.models import Count

    from benchmarks.models import WalkRow

    counts = WalkRow.objects.values("touched").annotate(n=Count("id")).order_by()
    return {row["touched"]: row["n"] for row in counts}


def plain(size: int) -> None:
    """The hand-written loop: the batch after the last key, its UPDATE, the next."""
    from benchmarks.jobs import touch
    from benchmarks.models import WalkRow

    last = 0
    while True:
        batch = list(WalkRow.objects.filter(pk__gt=last).order_by("pk")[:size])
        if batch:
            touch(batch)
            last = batch[-1].pk
        if len(batch) < size:
            return


def floor(size: int) -> None:
    """The plain loop, and each batch recorded and its cursor moved in two fenced commits."""
    import uuid

    from django.db.models.functions import Now

    from benchmarks.jobs import touch
    from benchmarks.models import WalkProgress, WalkRow

    owner = str(uuid.uuid4())
    lease = timedelta(seconds=10)
    progress = WalkProgress.objects.create(owner=owner, expires=Now() + lease)
    held = WalkProgress.objects.filter(pk=progress.pk, owner=owner, expires__gt=Now())
    last = 0
    while True:
        batch = list(WalkRow.objects.filter(pk__gt=last).order_by("pk")[:size])
        if batch:
            touch(batch)
            last = batch[-1].pk
            if not held.update(done=last, expires=Now() + lease):  # the step's record
                raise SystemExit("FAIL: the floor's lease was lost")
            if not held.update(cursor=last):  # the commit
                raise SystemExit("FAIL: the floor's lease was lost")
        if len(batch) < size:
            progress.delete()
            return


def walked(size: int, max_passes: int) -> None:
    """One run of ``bench.walk`` driven here until it is done."""
    from django_leasejobs import RunStatus, run_due_jobs, start
    from django_leasejobs.models import Run

    run = start(JOB, {"size": size}).run
    while True:
        report = run_due_jobs(jobs=[JOB], max_passes=max_passes)
        if report.errors:
            raise SystemExit(f"FAIL: the walk's pass failed: {report.errors}")
        if report.completed:
            break
    assert Run.objects.get(pk=run.pk).status == RunStatus.DONE


def timings(rows: int, size: int, rounds: int) -> dict[str, Any]:
    """``time`` mode: each way of walking, timed in turn, *rounds* times."""
    ways = {
        "plain": lambda: plain(size),
        "walk": lambda: walked(size, 1),
        "walk, one drive": lambda: walked(size, rows // size + 2),
        "floor": lambda: floor(size),
    }
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    # Untimed: the table as fresh rows fill it has no free space in its pages, so
    # a first walk's every new row version goes to a new page, with a new index
    # entry; once walked and vacuumed, the versions fit in the pages' freed
    # space, as in every walk after. Each timed walk starts from that state.
    plain(size)
    expected = 1
    for number in range(rounds):
        order = list(ways) if number % 2 == 0 else list(reversed(ways))
        for name in order:
            vacuum()
            began = time.perf_counter()
            ways[name]()
            seconds[name].append(time.perf_counter() - began)
            expected += 1
            if touched() != {expected: rows}:
                raise SystemExit(f"FAIL: after {name!r} the rows were touched {touched()}")
    return {"seconds": seconds}


def killed(rows: int, size: int, every: float) -> dict[str, Any]:
    """``kill`` mode: a ``--loop`` worker SIGKILLed every *every* seconds until the run is done."""
    from benchmarks.models import WalkRow
    from django_leasejobs import RunStatus, start
    from django_leasejobs.models import Run

    WalkRow.objects.update(touched=0)
    vacuum()
    run = start(JOB, {"size": size}).run
    # As docs/howto/backfills.md runs a backfill's worker: going on with the run (§13).
    command = [sys.executable, "-m", "django", "rundueJobs", "--loop", "--job", JOB]
    command += ["--max-passes", "1000"]
    kills = 0
    began = time.monotonic()
    while Run.objects.get(pk=run.pk).status != RunStatus.DONE:
        worker = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + every
            while time.monotonic() < deadline and worker.poll() is None:
                if Run.objects.get(pk=run.pk).status == RunStatus.DONE:
                    break
                time.sleep(0.05)
        finally:
            if worker.poll() is None:
                if Run.objects.get(pk=run.pk).status != RunStatus.DONE:
                    worker.send_signal(signal.SIGKILL)
                    kills += 1
                else:
                    worker.terminate()  # done: stopped as a deploy would stop it
            worker.wait()
    final = Run.objects.get(pk=run.pk)
    return {
        "seconds": time.monotonic() - began,
        "kills": kills,
        "touched": touched(),
        "walked": json.loads(final.counters).get("walked", 0),
    }


def child(args: argparse.Namespace) -> None:
    import django

    django.setup()
    result: dict[str, Any] = {"server": setup(args.rows)}
    if "time" in args.modes:
        result["time"] = timings(args.rows, args.size, args.rounds)
    if "kill" in args.modes:
        result["kill"] = killed(args.rows, args.size, args.kill_every)
    Path(args.result).write_text(json.dumps(result))


# -- the parent ----------------------------------------------------------------------------------


def report(args: argparse.Namespace, result: dict[str, Any]) -> int:
    """Print what the child measured; 1 when a check failed."""
    failed = 0
    print(f"{args.rows:,} rows, batches of {args.size:,}, {result['server']}")
    if "time" in result:
        seconds = result["time"]["seconds"]
        plain_total = sum(seconds["plain"])
        print("| way | " + " | ".join(f"round {n + 1}" for n in range(args.rounds)) + " | total |")
        print("|---|" + "---|" * (args.rounds + 1))
        for name, each in seconds.items():
            cells = " | ".join(f"{s:.2f} s" for s in each)
            print(f"| {name} | {cells} | {sum(each):.2f} s |")
        for name in ("walk", "walk, one drive", "floor"):
            ratio = sum(seconds[name]) / plain_total
            print(f"{name} / plain: {ratio:.3f} (target: at most 1.05)")
        over = sum(seconds["walk, one drive"]) / sum(seconds["floor"])
        print(f"walk, one drive / floor: {over:.3f}")
    if "kill" in result:
        kill = result["kill"]
        counts = {int(k): n for k, n in kill["touched"].items()}
        skipped = counts.get(0, 0)
        twice = sum(n * (k - 1) for k, n in counts.items() if k > 1)
        batches = -(-twice // args.size)
        print(
            f"killed every {args.kill_every} s: {kill['kills']} kills, done in "
            f"{kill['seconds']:.1f} s; rows by times touched {dict(sorted(counts.items()))}; "
            f"counter walked={kill['walked']:,}"
        )
        print(f"skipped rows: {skipped}; rows done again: {twice} (≈ {batches} batches)")
        if skipped:
            print("FAIL: rows were skipped")
            failed = 1
        if twice > kill["kills"] * args.size:
            print("FAIL: more than one batch repeated per kill")
            failed = 1
    return failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="(default: %(default)s)")
    parser.add_argument("--size", type=int, default=1000, help="batch (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=2, help="time mode (default: %(default)s)")
    parser.add_argument(
        "--kill-every", type=float, default=30, help="seconds, kill mode (default: %(default)s)"
    )
    parser.add_argument("--modes", nargs="+", choices=["time", "kill"], default=["time", "kill"])
    parser.add_argument("--database", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0

    from benchmarks.drain import child_result, fresh_database

    arguments = ["--child", "--rows", str(args.rows), "--size", str(args.size)]
    arguments += ["--rounds", str(args.rounds), "--kill-every", str(args.kill_every)]
    arguments += ["--modes", *args.modes]
    with tempfile.TemporaryDirectory() as tmp:
        url = fresh_database(args.database, Path(tmp))
        result = child_result(__file__, url, Path(tmp) / "walk.json", arguments, quiet=False)
    return report(args, result)


if __name__ == "__main__":
    sys.exit(main())
