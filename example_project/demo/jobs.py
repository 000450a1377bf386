"""The demo's jobs, registered when Django starts.

django-leasejobs imports every installed app's ``jobs`` module (as the admin
does ``admin.py``), so defining them here is all the registration they need.
Start one from code with ``django_leasejobs.start(name, payload)``; a drive
(``manage.py rundueJobs``) runs its passes.
"""

from __future__ import annotations

import logging
import random
from datetime import UTC, timedelta
from typing import TYPE_CHECKING, Any

from django.db import connections, router
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from django_leasejobs import Defer, Retry, job

from . import remote
from .models import Contact

if TYPE_CHECKING:
    from django_leasejobs import Pass

logger = logging.getLogger(__name__)


@job(
    "demo.import_contacts",
    lease=timedelta(minutes=2),
    retry=Retry(max_attempts=5, base=timedelta(seconds=5), cap=timedelta(minutes=2)),
)
def import_contacts(p: Pass) -> Any:
    """Copy every contact of one CRM source into ``Contact``, one page per pass.

    Payload: ``{"source": "crm"}``. The cursor is the CRM's page token, so a
    killed worker or a deploy costs at most the page in flight: the next pass
    resumes from the last committed token, not from the first page.

    Two steps rather than one block, so that a failure repeats only what
    failed. Once the fetch is recorded, a retry after the save failed re-saves
    the same page without asking the CRM again. The save is an upsert keyed on
    ``external_id``, so running it twice (a crash after it wrote, before the
    step was recorded) leaves the same rows, not copies.
    """
    source = (p.payload or {}).get("source", "crm")
    # Step results are stored as JSON and returned from that stored form, so
    # both steps return plain dicts, lists, strings and numbers.
    page = p.step(f"fetch:{p.cursor}", lambda: remote.page(source, p.cursor))
    saved = p.step(f"save:{p.cursor}", lambda: save_contacts(page["items"]))
    # Counters are merged when the pass commits and dropped when it fails, so a
    # retried page is counted once.
    p.count("imported", saved)
    if p.cursor is None:
        p.total(page["total"])  # The first page tells how many there are: a progress bar.
    return p.done() if page["next"] is None else p.advance(page["next"])


def save_contacts(items: list[dict[str, str]]) -> int:
    """Insert or update *items* by ``external_id`` in one statement; return how many."""
    now = timezone.now()
    rows = [
        Contact(external_id=item["id"], name=item["name"], email=item["email"], imported_at=now)
        for item in items
    ]
    # PostgreSQL and SQLite need the conflict target named; MySQL and MariaDB
    # refuse one (their upsert fires on any unique key).
    features = connections[router.db_for_write(Contact)].features
    Contact.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["external_id"] if features.supports_update_conflicts_with_target else None,
        update_fields=["name", "email", "imported_at"],
    )
    return len(rows)


@job(
    "demo.nightly_report",
    schedule="0 3 * * *",
    timezone="Europe/Paris",
    missed="catch_up_once",
    timeout=timedelta(minutes=10),
)
def nightly_report(p: Pass) -> Any:
    """Log a one-line summary of the contacts, every night at 03:00 Paris time.

    ``catch_up_once``: after the workers were down for a few nights, one report
    is enough (it describes today's table); the missed nights are still
    recorded for the operator. The timeout fails a pass stuck on a locked or
    overloaded database instead of letting it hold the schedule's run all day.
    Only counts are logged: never the payload, which a site may fill with
    whatever it likes.
    """
    total = Contact.objects.count()
    since = timezone.now() - timedelta(days=1)
    fresh = Contact.objects.filter(imported_at__gte=since).count()
    p.check()  # Out of time (or lease) after the queries? Stop before reporting.
    p.count("contacts", total)
    logger.info("Nightly report run=%s contacts=%d imported_last_24h=%d", p.run.id, total, fresh)
    return p.done()


@job(
    "demo.flaky_sync",
    retry=Retry(max_attempts=6, base=timedelta(seconds=1), cap=timedelta(seconds=30)),
)
def flaky_sync(p: Pass) -> Any:
    """Push to an unreliable upstream, to watch retries and deferral in the admin.

    Payload (all optional): ``failure_rate`` (0 to 1, default 0.5), the chance
    that the call fails; ``rate_limited_until`` (an ISO 8601 time), until when
    the upstream answers "too many requests".

    A failed call raises: the pass fails, the run's attempts go up and it is
    due again after 1 s, 2 s, 4 s ... at most 30 s (with jitter); the sixth
    failure in a row fails the run, its last error kept for the operator. A
    rate limit is not a failure, since the upstream did no work: ``Defer``
    brings the run back in 30 s and charges no attempt. (A real client would
    wait as long as the response's ``Retry-After`` says.)
    """
    payload = p.payload or {}
    until = parse_datetime(payload.get("rate_limited_until") or "")
    if until is not None:
        if timezone.is_naive(until):
            until = until.replace(tzinfo=UTC)
        if timezone.now() < until:
            raise Defer(timedelta(seconds=30), "upstream rate limit")
    failure_rate = float(payload.get("failure_rate", 0.5))
    if random.random() < failure_rate:
        raise ConnectionError("upstream did not answer (simulated)")
    p.count("synced")
    return p.done()
