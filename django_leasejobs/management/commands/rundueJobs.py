"""``manage.py rundueJobs``: drive due runs once (for cron), or keep driving (--loop).

The name is the one users asked for; ``run_due_jobs`` is the conventional alias.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from django_leasejobs.conf import conf
from django_leasejobs.driver import DriveReport, run_due_jobs
from django_leasejobs.errors import one_line
from django_leasejobs.exceptions import JobNotRegistered
from django_leasejobs.management.arguments import quantity, whole_number
from django_leasejobs.management.verbosity import configure_logging
from django_leasejobs.registry import get_job
from django_leasejobs.worker import Worker

valid_positive_int = whole_number(1)
valid_interval = quantity("seconds", most=86400, zero_ok=False)
valid_stop_timeout = quantity("seconds", most=86400, zero_ok=True)


class Command(BaseCommand):
    help = (
        "Drive due django-leasejobs runs once and exit (for cron), or keep driving with "
        "--loop. Exit status 0 when the drive ran, whatever the runs did."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--limit",
            type=valid_positive_int,
            default=None,
            help="Runs to take on per drive (default: LEASEJOBS['DRIVE_LIMIT'], 50).",
        )
        parser.add_argument(
            "--max-passes",
            type=valid_positive_int,
            default=None,
            help="Passes per run per drive (default: LEASEJOBS['MAX_PASSES'], 1).",
        )
        parser.add_argument(
            "--job",
            action="append",
            dest="jobs",
            metavar="NAME",
            help="Only drive this job; repeat for several (default: every registered job).",
        )
        parser.add_argument(
            "--loop",
            action="store_true",
            help="Keep driving until SIGTERM/SIGINT, which stops after the pass in flight.",
        )
        parser.add_argument(
            "--interval",
            type=valid_interval,
            default=5.0,
            help="Seconds between drives with --loop (default: %(default)r).",
        )
        parser.add_argument(
            "--stop-timeout",
            type=valid_stop_timeout,
            default=None,
            metavar="SECONDS",
            help=(
                "With --loop: after SIGTERM/SIGINT, release a pass still running after this many "
                "seconds at its next step boundary (default: wait for the pass to finish). A "
                "second signal exits at once."
            ),
        )
        parser.add_argument(
            "--json", action="store_true", help="Print each drive's report as one JSON object."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        verbosity: int = options["verbosity"]
        configure_logging(verbosity)
        self.as_json: bool = options["json"]
        self.verbosity = verbosity
        limit = options["limit"] or conf.DRIVE_LIMIT
        max_passes = options["max_passes"] or conf.MAX_PASSES
        jobs = options["jobs"]
        try:
            for name in jobs or ():
                get_job(name)  # Refuse an unknown --job before driving anything.
        except JobNotRegistered as exc:
            raise CommandError(str(exc)) from None
        if options["loop"]:
            Worker(
                interval=options["interval"],
                limit=limit,
                max_passes=max_passes,
                jobs=jobs,
                stop_timeout=options["stop_timeout"],
                on_report=self._print,
            ).run()
            return
        try:
            report = run_due_jobs(limit=limit, max_passes=max_passes, jobs=jobs)
        except DatabaseError as exc:
            raise CommandError(f"the drive could not run: {one_line(exc)}") from None
        self._print(report)
        if report.aborted:
            raise CommandError(f"the drive stopped early: {report.aborted}")

    def _print(self, report: DriveReport) -> None:
        if self.as_json:
            self.stdout.write(json.dumps(report.as_dict(), sort_keys=True))
        elif self.verbosity >= 1:
            self.stdout.write(report.summary())
            if self.verbosity >= 2:
                for note in report.errors:
                    self.stdout.write(f"  error {note.run_id}: {note.text}")
                for note in report.warnings:
                    self.stdout.write(f"  warning {note.run_id}: {note.text}")
