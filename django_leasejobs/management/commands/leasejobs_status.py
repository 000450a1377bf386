"""``manage.py leasejobs_status``: the schedules and the live runs, for an operator
without the admin (S6).

Read-only: it reads the Schedule rows, each scheduled job's live run (for its
state) and the newest live runs, and writes nothing. A run's payload is never
read into the output; its cursor is shown as raw text cut to 40 characters.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, router

from django_leasejobs import store
from django_leasejobs.clock import get_clock
from django_leasejobs.errors import connection_lost, one_line, unreadable_reason
from django_leasejobs.management.arguments import whole_number
from django_leasejobs.models import Run, Schedule
from django_leasejobs.querysets import RunQuerySet
from django_leasejobs.schedules import live_runs, problem, state
from django_leasejobs.states import RunStatus

#: The most characters of a cursor shown (its raw JSON text).
CURSOR_MAX = 40
#: The most live runs one call lists.
LIMIT_MAX = 10000
#: What an empty cell reads as.
EMPTY = "—"

#: The columns of the live-run read: never the payload (nor the rerun payload).
_RUN_FIELDS = (
    "id",
    "job",
    "instance",
    "status",
    "attempts",
    "failure_code",
    "cursor",
    "started_at",
    "next_attempt_at",
    "lease_owner",
    "lease_holder",
)


valid_limit = whole_number(1, LIMIT_MAX)


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    if moment.tzinfo is None:  # USE_TZ = False stores UTC wall times (a system check warns)
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat()


def _cut(text: str | None, limit: int) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return text[: limit - 1] + "…"


def schedule_entry(row: Schedule, live: Run | None, now: datetime) -> dict[str, Any]:
    """One schedule as the JSON output lists it (the table shows the same)."""
    return {
        "job": row.job,
        "state": state(row, live, now),
        "problem": problem(row),
        "enabled": row.enabled,
        "expression": row.expression,
        "timezone": row.timezone,
        "rule": row.rule,
        "next_due_at": _iso(row.next_due_at),
        "paused": row.paused_at is not None,
        "paused_at": _iso(row.paused_at),
        "paused_by": row.paused_by or None,
        "pause_note": row.pause_note or None,
        "last_run": row.last_run_id,
        "last_outcome": row.last_outcome or None,
        "last_run_at": _iso(row.last_run_at),
        "last_success_at": _iso(row.last_success_at),
    }


def run_entry(run: Run, now: datetime) -> dict[str, Any]:
    """One live run as the JSON output lists it: no payload, the cursor cut short."""
    leased = run.status == RunStatus.RUNNING and run.lease_owner is not None
    expired = None
    if leased:
        expired = run.next_attempt_at is None or run.next_attempt_at <= now
    return {
        "id": run.id,
        "job": run.job,
        "instance": run.instance,
        "status": run.status,
        "attempts": run.attempts,
        "failure_code": run.failure_code or None,
        "cursor": _cut(run.cursor, CURSOR_MAX),
        "started_at": _iso(run.started_at),
        "next_attempt_at": _iso(run.next_attempt_at),
        "lease_holder": (run.lease_holder or "?") if leased else None,
        "lease_expired": expired,
    }


def unreadable_entry(run_id: str, reason: str) -> dict[str, Any]:
    """A live run whose row the database cannot hand back (R9, §12): its id and why."""
    fields = ("job", "instance", "status", "attempts", "failure_code", "cursor", "started_at")
    unknown = dict.fromkeys((*fields, "next_attempt_at", "lease_holder", "lease_expired"))
    return unknown | {"id": run_id, "unreadable": reason}


def _read_runs(runs: RunQuerySet, now: datetime) -> list[dict[str, Any]]:
    """The runs as entries; a row that cannot be read back is listed as unreadable, not fatal."""
    try:
        return [run_entry(run, now) for run in runs]
    except (DatabaseError, ValueError, TypeError, OverflowError) as exc:
        if isinstance(exc, DatabaseError) and connection_lost(runs.db):
            raise
    entries = []
    for run_id in runs.values_list("pk", flat=True):  # ids are ASCII: they always read
        try:
            entries.append(run_entry(runs.model.objects.using(runs.db).get(pk=run_id), now))
        except (DatabaseError, ValueError, TypeError, OverflowError) as exc:
            entries.append(unreadable_entry(run_id, unreadable_reason(exc)))
    return entries


def read_status(jobs: Sequence[str] | None, limit: int) -> tuple[dict[str, Any], bool]:
    """Read what the command prints: ``{"now", "schedules", "runs", "stranded"}``.

    The flag says whether more than *limit* runs are live (the list is cut).
    """
    using = router.db_for_write(Schedule)
    now = get_clock().now(using)
    schedules = Schedule.objects.using(using).all()
    runs = Run.objects.using(using).live()
    if jobs:
        schedules = schedules.filter(job__in=jobs)
        runs = runs.filter(job__in=jobs)
    # Enabled first, then by job, sorted here so every database orders alike.
    rows = sorted(schedules, key=lambda row: (not row.enabled, row.job))
    live = live_runs([row.job for row in rows]) if rows else {}
    newest = _read_runs(runs.only(*_RUN_FIELDS).order_by("-started_at", "-id")[: limit + 1], now)
    stranded = store.stranded(limit)
    status = {
        "now": _iso(now),
        "schedules": [schedule_entry(row, live.get(row.job), now) for row in rows],
        "runs": newest[:limit],
        "stranded": [{"id": run_id, "why": why} for run_id, why in stranded],
    }
    return status, len(newest) > limit


# -- the plain-text tables ------------------------------------------------------------


def _printable(text: str) -> str:
    """One line of text: control characters (a newline in a note) become spaces."""
    return "".join(char if char.isprintable() else " " for char in text)


def _width(text: str) -> int:
    """Terminal columns *text* takes: wide East Asian characters two, combining marks none."""
    return sum(
        0 if unicodedata.combining(char) else 2 if unicodedata.east_asian_width(char) in "WF" else 1
        for char in text
    )


def _cell(value: Any) -> str:
    if value is None or value == "":
        return EMPTY
    return _printable(str(value))


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """Left-aligned columns as wide as their widest cell, two spaces apart."""
    cells = [list(headers)] + [[_cell(value) for value in row] for row in rows]
    widths = [max(_width(line[column]) for line in cells) for column in range(len(headers))]
    return [
        "  ".join(
            text + " " * (width - _width(text)) for text, width in zip(line, widths, strict=True)
        ).rstrip()
        for line in cells
    ]


def _seconds(moment: str | None) -> str | None:
    """An ISO time as the table shows it: to the second."""
    return None if moment is None else datetime.fromisoformat(moment).isoformat("T", "seconds")


def _paused(entry: dict[str, Any]) -> str | None:
    if not entry["paused"]:
        return None
    who = entry["paused_by"] or "paused"
    return f"{who}: {entry['pause_note']}" if entry["pause_note"] else who


def _last_run(entry: dict[str, Any]) -> str | None:
    parts = [entry["last_run"], entry["last_outcome"], _seconds(entry["last_run_at"])]
    return " ".join(part for part in parts if part) or None


def _holder(entry: dict[str, Any]) -> str | None:
    holder = entry["lease_holder"]
    if holder is None:
        return None
    return f"{holder} (expired)" if entry["lease_expired"] else holder


SCHEDULE_HEADERS = ("JOB", "STATE", "SCHEDULE", "RULE", "NEXT DUE", "PAUSED", "LAST RUN", "ENABLED")
RUN_HEADERS = (
    "ID",
    "JOB",
    "INSTANCE",
    "STATUS",
    "ATTEMPTS",
    "FAILURE",
    "CURSOR",
    "STARTED",
    "NEXT ATTEMPT",
    "LEASE HOLDER",
)


def render(status: dict[str, Any], cut_at: int | None = None) -> list[str]:
    """The plain-text report of :func:`read_status`; *cut_at* is the limit if runs were cut."""
    lines = [f"now {_seconds(status['now'])}", "", "Schedules"]
    schedules = [
        (
            entry["job"],
            f"{entry['state']}: {entry['problem']}" if entry["problem"] else entry["state"],
            f"{entry['expression']} ({entry['timezone']})",
            entry["rule"],
            _seconds(entry["next_due_at"]),
            _paused(entry),
            _last_run(entry),
            "yes" if entry["enabled"] else "disabled",
        )
        for entry in status["schedules"]
    ]
    lines += table(SCHEDULE_HEADERS, schedules) if schedules else ["no schedules"]
    lines += ["", "Live runs (newest first)"]
    runs = [
        (
            entry["id"],
            entry["job"],
            entry["instance"],
            entry["status"],
            entry["attempts"],
            entry["failure_code"],
            entry["cursor"],
            _seconds(entry["started_at"]),
            _seconds(entry["next_attempt_at"]),
            _holder(entry),
        )
        for entry in status["runs"]
    ]
    lines += table(RUN_HEADERS, runs) if runs else ["no live runs"]
    if cut_at:
        lines.append(f"(more than {cut_at} live runs: --limit N shows more)")
    unreadable = [entry for entry in status["runs"] if entry.get("unreadable")]
    stranded = [(entry["id"], entry["why"]) for entry in status["stranded"]]
    stranded += [(entry["id"], f"cannot be read: {entry['unreadable']}") for entry in unreadable]
    if stranded:
        lines += ["", "Stranded or unreadable runs (no drive will finish them as they are)"]
        lines += table(("ID", "WHY"), stranded)
    return lines


class Command(BaseCommand):
    help = (
        "Show django-leasejobs schedules (with their state) and live runs, for operators "
        "without the admin. Read-only; payloads are never shown."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--job",
            action="append",
            dest="jobs",
            metavar="NAME",
            help="Only this job's schedule and runs; repeat for several (default: all).",
        )
        parser.add_argument(
            "--limit",
            type=valid_limit,
            default=50,
            metavar="N",
            help="The most live runs listed, newest first (default: %(default)r).",
        )
        parser.add_argument(
            "--json", action="store_true", help="Print one JSON object instead of the tables."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        limit: int = options["limit"]
        try:
            status, cut = read_status(options["jobs"], limit)
        except DatabaseError as exc:
            # One line on stderr, for cron mail and alerting, whatever the driver said.
            raise CommandError(f"the status could not be read: {one_line(exc)}") from None
        if options["json"]:
            self.stdout.write(json.dumps(status, sort_keys=True))
        else:
            self.stdout.write("\n".join(render(status, limit if cut else None)))
