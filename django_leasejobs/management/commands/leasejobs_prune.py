"""``manage.py leasejobs_prune``: delete finished runs and old missed-run records (S7)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from django_leasejobs.errors import one_line
from django_leasejobs.management.arguments import quantity, whole_number
from django_leasejobs.management.verbosity import configure_logging
from django_leasejobs.retention import PruneReport, prune

#: A century: more would put the cutoff before the year 1 on some clocks.
MAX_DAYS = 36500


valid_days = quantity("days", most=MAX_DAYS, zero_ok=False)
valid_batch_size = whole_number(1)


class Command(BaseCommand):
    help = (
        "Delete finished django-leasejobs runs (with their step rows) and missed-run records "
        "older than the retention, in bounded batches. Live runs are never deleted."
    )

    def add_arguments(self, parser: CommandParser) -> None:
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
        parser.add_argument(
            "--json", action="store_true", help="Print the counts as one JSON object."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        verbosity: int = options["verbosity"]
        configure_logging(verbosity)
        days: float | None = options["older_than"]
        try:
            report = prune(
                older_than=None if days is None else timedelta(days=days),
                batch_size=options["batch_size"],
                dry_run=options["dry_run"],
            )
        except DatabaseError as exc:
            # One line on stderr, for cron mail and alerting, whatever the driver said.
            raise CommandError(f"the prune could not run: {one_line(exc)}") from None
        self._print(report, as_json=options["json"], verbosity=verbosity)

    def _print(self, report: PruneReport, *, as_json: bool, verbosity: int) -> None:
        if as_json:
            self.stdout.write(json.dumps(report.as_dict(), sort_keys=True))
        elif verbosity >= 1:
            self.stdout.write(report.summary())
