"""``manage.py rundueJobs``: drive due runs once (for cron), or keep driving (--loop).

The name is the one users asked for; ``run_due_jobs`` is the conventional alias.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError, CommandParser

from django_leasejobs.driver import DriveReport, run_due_jobs
from django_leasejobs.management.arguments import (
    quantity,
    queue_name,
    registered_job,
    whole_number,
)
from django_leasejobs.management.base import LeaseJobsCommand
from django_leasejobs.registry import registry
from django_leasejobs.resting import drive_for
from django_leasejobs.routing import DEFAULT_QUEUE
from django_leasejobs.stats import aggregate
from django_leasejobs.worker import Worker

logger = logging.getLogger("django_leasejobs")

valid_positive_int = whole_number(1)
valid_interval = quantity("seconds", most=86400, zero_ok=False)
valid_stop_timeout = quantity("seconds", most=86400, zero_ok=True)
valid_max_seconds = quantity("seconds", most=86400, zero_ok=False)
valid_port = whole_number(1, 65535)
#: Where --metrics-port listens unless --metrics-address says otherwise: this machine only.
METRICS_ADDRESS = "127.0.0.1"


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
            "--concurrency",
            type=valid_positive_int,
            default=None,
            metavar="N",
            help=(
                "Passes to run at once, each on a thread and a database connection of its own "
                "(W5); at most N + 2 connections per process. Default: "
                "LEASEJOBS['CONCURRENCY'], 1."
            ),
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
            help=(
                "Keep driving until SIGTERM/SIGINT, which stops after the pass in flight. "
                "Prints the report of each drive that did something (-v 2: of every drive)."
            ),
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
        parser.add_argument(
            "--metrics-port",
            type=valid_port,
            default=None,
            metavar="PORT",
            help=(
                "Serve this process's own Prometheus metrics (passes, durations, claims lost, "
                "throttled passes, connections) on this port for as long as it runs (O2); needs "
                "django-leasejobs[prometheus]."
            ),
        )
        parser.add_argument(
            "--metrics-address",
            default=None,
            metavar="ADDRESS",
            help=f"With --metrics-port: the address to listen on (default: {METRICS_ADDRESS}).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        stop_metrics = self._serve_metrics(options["metrics_port"], options["metrics_address"])
        try:
            self._drive(options)
        finally:
            stop_metrics()

    def _serve_metrics(self, port: int | None, address: str | None) -> Callable[[], None]:
        """Start ``--metrics-port``'s server (O2) before anything is driven; return its stop."""
        if port is None:
            if address is not None:
                raise CommandError("--metrics-address is where --metrics-port listens; give both")
            return lambda: None
        address = METRICS_ADDRESS if address is None else address
        try:
            import prometheus_client  # noqa: F401 - only whether it is installed
        except ImportError:
            raise CommandError(
                "--metrics-port needs prometheus-client: pip install 'django-leasejobs[prometheus]'"
            ) from None
        from django_leasejobs.metrics import serve_worker_metrics

        try:
            stop = serve_worker_metrics(port, address)
        except OSError as exc:  # in use, not ours to bind, or an address that does not resolve
            reason = exc.strerror or str(exc)
            raise CommandError(
                f"--metrics-port {port}: cannot listen on {address}: {reason}"
            ) from None
        logger.info("Worker metrics served on %s port %s", address, port)
        return stop

    def _drive(self, options: dict[str, Any]) -> None:
        drive = {
            "limit": options["limit"],
            "max_passes": options["max_passes"],
            "jobs": options["jobs"],
            "queues": options["queues"],
            "concurrency": options["concurrency"],
        }
        if options["loop"] and options["max_seconds"] is not None:
            raise CommandError("--max-seconds bounds a one-shot run; --loop keeps driving")
        for name in sorted(set(options["queues"] or ()) - declared_queues()):
            # W4: a misspelt queue must not be an idle worker in silence.
            self.stderr.write(
                f"warning: --queue {name!r}: no registered job declares it and no TASKS "
                f"alias lists it; runs started with queue={name!r} are still driven"
            )
        if options["loop"]:
            worker = Worker(
                interval=options["interval"],
                stop_timeout=options["stop_timeout"],
                on_report=self._print_drive,
                **drive,
            )
            worker.run()
            return
        try:
            if options["max_seconds"] is None:
                report = run_due_jobs(**drive)
            else:
                report = drive_for(options["max_seconds"], **drive)
        finally:
            aggregate.flush(force=True)  # O1: a cron one-shot's figures, at exit
        self._print(report)
        if report.aborted:
            raise CommandError(f"the drive stopped early: {report.aborted}")

    def _print_drive(self, report: DriveReport) -> None:
        """A ``--loop`` drive's report: an idle drive says nothing unless ``-v 2`` (D5)."""
        if report.idle and self.verbosity < 2:
            return
        self._print(report)

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


def declared_queues() -> set[str]:
    """The queues this site names: each registered job's, and each ``TASKS`` alias's (W4)."""
    names = {spec.queue for spec in registry}
    for params in (getattr(settings, "TASKS", None) or {}).values():
        queues = params.get("QUEUES", [DEFAULT_QUEUE]) if isinstance(params, dict) else ()
        names |= {queues} if isinstance(queues, str) else set(_names(queues))
    return names


def _names(queues: object) -> Iterable[str]:
    return (
        (name for name in queues if isinstance(name, str)) if isinstance(queues, Iterable) else ()
    )
