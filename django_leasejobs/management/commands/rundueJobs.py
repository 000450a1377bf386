"""``manage.py rundueJobs``: drive due runs once (for cron), or keep driving (--loop).

The name is the one users asked for; ``run_due_jobs`` is the conventional alias.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from django_leasejobs.driver import DriveReport, drive_for, run_due_jobs
from django_leasejobs.management.arguments import (
    quantity,
    queue_name,
    registered_job,
    whole_number,
)
from django_leasejobs.management.base import LeaseJobsCommand
from django_leasejobs.worker import Worker

valid_positive_int = whole_number(1)
valid_interval = quantity("seconds", most=86400, zero_ok=False)
valid_stop_timeout = quantity("seconds", most=86400, zero_ok=True)
valid_max_seconds = quantity("seconds", most=86400, zero_ok=False)


class Command(LeaseJobsCommand):
    could_not = "the drive could not run"
    json_help = "Print each drive's report as one JSON object."
    help = (
        "Drive due django-leasejobs runs once and exit (for cron), or keep driving with "
        "--loop. Exit status 0 when the drive ran, whatever the runs did."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
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
            type=registered_job,
            metavar="NAME",
            help="Only drive this job; repeat for several (default: every registered job).",
        )
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            type=queue_name,
            metavar="NAME",
            help="Only drive runs of this queue; repeat for several (default: every queue) (W4).",
        )
        parser.add_argument(
            "--max-seconds",
            type=valid_max_seconds,
            default=None,
            metavar="S",
            help=(
                "One-shot: drive again while the last drive did work, and exit at the first "
                "drive that finds nothing due or once S seconds have passed, with the combined "
                "report (W3). For cron: --max-seconds 55 each minute."
            ),
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
            help=(
                "With --loop: seconds to rest after a drive that found nothing due, unless a "
                "notification of new work comes first (PostgreSQL); a drive that did work is "
                "followed by the next at once (default: %(default)r)."
            ),
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

    def handle(self, *args: Any, **options: Any) -> None:
        drive = {
            "limit": options["limit"],
            "max_passes": options["max_passes"],
            "jobs": options["jobs"],
            "queues": options["queues"],
        }
        if options["loop"] and options["max_seconds"] is not None:
            raise CommandError("--max-seconds bounds a one-shot run; --loop keeps driving")
        if options["loop"]:
            worker = Worker(
                interval=options["interval"],
                stop_timeout=options["stop_timeout"],
                on_report=self._print,
                **drive,
            )
            worker.run()
            return
        if options["max_seconds"] is None:
            report = run_due_jobs(**drive)
        else:
            report = drive_for(options["max_seconds"], **drive)
        self._print(report)
        if report.aborted:
            raise CommandError(f"the drive stopped early: {report.aborted}")

    def _print(self, report: DriveReport) -> None:
        if self.as_json:
            self.write_json(report.as_dict())
        elif self.verbosity >= 1:
            self.stdout.write(report.summary())
            if self.verbosity >= 2:
                for note in report.errors:
                    self.stdout.write(f"  error {note.run_id}: {note.text}")
                for note in report.warnings:
                    self.stdout.write(f"  warning {note.run_id}: {note.text}")
