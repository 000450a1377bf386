"""What the app's commands share: ``-v`` mapped onto the package logger, ``--json``, and
a database error turned into one line on stderr (D5).

Cron mail and alerting read the first line of a failed command; a driver's
message can span several (psycopg's "connection refused" is two), so it is
folded, and nothing of a database URL survives (``errors.describe`` masks it).
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from django_leasejobs.errors import one_line
from django_leasejobs.times import LogFormatter

__all__ = ["LeaseJobsCommand", "configure_logging"]

_LEVELS = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO, 3: logging.DEBUG}


def configure_logging(verbosity: int) -> None:
    """Set the ``django_leasejobs`` logger's level; log to stderr if the site set up nothing."""
    logger = logging.getLogger("django_leasejobs")
    logger.setLevel(_LEVELS.get(verbosity, logging.DEBUG))
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        # Its times as every other time the app prints: in the site's zone, named (A8).
        handler.setFormatter(LogFormatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(handler)


class LeaseJobsCommand(BaseCommand):
    """A command of this app: subclasses say what failed (``could_not``) and what --json prints."""

    #: The start of the one line printed when the database cannot be used.
    could_not = "the command could not run"
    json_help = "Print the result as one JSON object."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help=self.json_help)

    def execute(self, *args: Any, **options: Any) -> Any:
        configure_logging(options["verbosity"])
        self.as_json: bool = options.get("json", False)
        self.verbosity: int = options["verbosity"]
        try:
            return super().execute(*args, **options)
        except DatabaseError as exc:
            raise CommandError(f"{self.could_not}: {one_line(exc)}") from None

    def write_json(self, data: Any) -> None:
        self.stdout.write(json.dumps(data, sort_keys=True))
