"""Start benchmark: how fast do ``start()`` one by one and ``start_many()`` write new runs?

    python benchmarks/starts.py [--database postgres] [--n 3000] [--runs 3] [--prepare]

Each run empties the run table, then times *n* calls of ``start()`` in
autocommit (one run each, every one its own instance, as a site enqueueing
work from its views would), then one ``start_many()`` of *n* items. It prints
starts per second for each run; compare figures only with others taken in the
same minutes (see README.md). ``--prepare`` sets ``LEASEJOBS["PREPARE"]``.
The database is dropped and created again first, as ``drain.py`` does.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(args: argparse.Namespace) -> None:
    from benchmarks.drain import fresh_database

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["DATABASE_URL"] = fresh_database(args.database, Path(tmp))
        os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
        if args.prepare:
            os.environ["LEASEJOBS_BENCH_PREPARE"] = "1"  # read by benchmarks/settings.py
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        measure(args.n, args.runs)


def measure(n: int, runs: int) -> None:
    from django_leasejobs import start, start_many
    from django_leasejobs.models import Run

    for number in range(runs):
        Run.objects.all().delete()
        began = time.perf_counter()
        for item in range(n):
            start("bench.noop", {"n": item}, instance=f"one-{number}-{item}")
        one = time.perf_counter() - began
        Run.objects.all().delete()
        began = time.perf_counter()
        start_many("bench.noop", [(f"many-{number}-{i}", {"n": i}) for i in range(n)])
        many = time.perf_counter() - began
        print(
            f"run {number + 1}: start() {n / one:,.0f}/s ({one / n * 1e6:.0f} µs each), "
            f"start_many() {n / many:,.0f} rows/s"
        )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgres", "mariadb"], default="postgres")
    parser.add_argument("--n", type=int, default=3000, help="starts per run (default 3000)")
    parser.add_argument("--runs", type=int, default=3, help="runs (default 3)")
    parser.add_argument("--prepare", action="store_true", help='LEASEJOBS["PREPARE"] = True')
    return parser.parse_args()


if __name__ == "__main__":
    main(parse_args())
