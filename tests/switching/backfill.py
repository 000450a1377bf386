"""Recipe (d): a hand-written management-command backfill becomes a walk."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from django_leasejobs import job
from tests.models import Subscriber  # in your code: from shop.models import Subscriber


# [before]
# shop/management/commands/lowercase_emails.py
class Command(BaseCommand):
    help = "Lower-case every subscriber's email, 500 at a time."

    def handle(self, *args, **options):
        last = 0
        while True:
            batch = list(Subscriber.objects.filter(pk__gt=last).order_by("pk")[:500])
            if not batch:
                break
            for subscriber in batch:
                subscriber.email = subscriber.email.lower()
            Subscriber.objects.bulk_update(batch, ["email"])
            last = batch[-1].pk
            self.stdout.write(f"up to {last}")


# [end]


# [after]
# shop/jobs.py
def lowercase(batch):
    for subscriber in batch:
        subscriber.email = subscriber.email.lower()
    Subscriber.objects.bulk_update(batch, ["email"])


@job("shop.lowercase_emails")
def lowercase_emails(p):
    return p.walk(Subscriber.objects.all(), lowercase, size=500)


# Started once, from a shell, a deploy step or the admin's Add run:
#   start("shop.lowercase_emails")
