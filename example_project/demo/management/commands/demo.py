"""``manage.py demo``: the example's main job, end to end, in one command.

Starts (or joins) the contact import, then drives it the way cron would --
one ``rundueJobs`` drive after another -- until the run finishes, and prints
what each drive did and how the run ended.
"""

from __future__ import annotations

import time
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand

from demo.models import Contact
from django_leasejobs import RunStatus, start
from django_leasejobs.models import Run


class Command(BaseCommand):
    help = "Import the demo CRM's contacts with django-leasejobs and print the outcome."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--drives", type=int, default=30, help="Give up after this many drives (default: 30)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        result = start("demo.import_contacts", {"source": "crm"}, instance="crm")
        verb = "joined the live" if result.joined else "started"
        self.stdout.write(f"{verb} run {result.run.pk} of demo.import_contacts")
        run = result.run
        for drive in range(1, options["drives"] + 1):
            # Exactly what cron runs; three passes per drive to show resuming.
            self.stdout.write(f"drive {drive}: ", ending="")
            call_command("rundueJobs", "--job", "demo.import_contacts", "--max-passes", "3")
            run.refresh_from_db()
            if run.status != RunStatus.RUNNING:
                break
            time.sleep(0.2 if run.attempts else 0)  # a failed page waits for its backoff
        self._outcome(run)

    def _outcome(self, run: Run) -> None:
        counters = run.decoded_counters().value
        self.stdout.write("")
        self.stdout.write(f"run {run.pk}: status={run.status}")
        self.stdout.write(f"  counters={counters} progress_total={run.progress_total}")
        self.stdout.write(f"  started={run.started_at:%H:%M:%S} ended={run.ended_at:%H:%M:%S}")
        self.stdout.write(f"  contacts in the table: {Contact.objects.count()}")
        if run.status != RunStatus.DONE:
            self.stderr.write(f"  not done: {run.failure_code} {run.last_error}")
