"""``manage.py leasejobs_prune``: delete finished runs and old missed-run records (S7)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import CommandParser

from django_leasejobs.management.arguments import quantity, whole_number
from django_leasejobs.management.base import LeaseJobsCommand
from django_leasejobs.retention import prune

#: A century: more would put the cutoff before the year 1 on some clocks.
MAX_DAYS = 36500


valid_days = quantity("days", most=MAX_DAYS, zero_ok=False)
valid_batch_size = whole_number(1)


class Command(LeaseJobsCommand):
    could_not = "the prune could not run"
    json_help = "Print the counts as one JSON object."
    help = (
        "Delete finished django-leasejobs runs (with their step rows) and missed-run records "
        "older than the retention, in bounded batches. Live runs are never deleted."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument(
            "--older-than",
            type=valid_days,
            default=None,
            metavar="DAYS",
            help=(
                "Delete what is older than this many days, fractions allowed "
                "(default: LEASEJOBS['RETENTION'], 30 days)."
            ),
        )
        parser.add_argument(
            "--batch-size",
            type=valid_batch_size,
            default=1000,
            metavar="N",
            help="Rows deleted per statement, each batch in its own transaction "
            "(default: %(default)r).",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what would be deleted; delete nothing."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        days: float | None = options["older_than"]
        report = prune(
            older_than=None if days is None else timedelta(days=days),
            batch_size=options["batch_size"],
            dry_run=options["dry_run"],
        )
        if self.as_json:
            self.write_json(report.as_dict())
        elif self.verbosity >= 1:
            self.stdout.write(report.summary())
