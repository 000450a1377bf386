"""``manage.py leasejobs_status``: the schedules, the paused queues and the live runs,
for an operator without the admin (S6, W6). What it reports is read by
:mod:`django_leasejobs.status_report`; this module parses the arguments and renders the tables.

The tables write times and durations as the admin does (:mod:`django_leasejobs.times`:
``2026-03-01 12:00:00 UTC``, ``2 per 30 s``), in the site's zone, named; ``--json``
keeps ISO 8601 in UTC, for programs.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.core.management.base import CommandParser

from django_leasejobs.management.arguments import whole_number
from django_leasejobs.management.base import LeaseJobsCommand
from django_leasejobs.states import LeaseState, Throttle
from django_leasejobs.status_report import read_status
from django_leasejobs.times import duration, moment

#: The most live runs one call lists.
LIMIT_MAX = 10000
#: What an empty cell reads as.
EMPTY = "—"

valid_limit = whole_number(1, LIMIT_MAX)


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


def _when(text: str | None) -> str | None:
    """An ISO time of the JSON as the table shows it: as the admin does, zone named."""
    return None if text is None else moment(datetime.fromisoformat(text))


def _paused(entry: dict[str, Any]) -> str | None:
    if not entry["paused"]:
        return None
    who = entry["paused_by"] or "paused"
    return f"{who}: {entry['pause_note']}" if entry["pause_note"] else who


def _last_run(entry: dict[str, Any]) -> str | None:
    parts = [entry["last_run"], entry["last_outcome"], _when(entry["last_run_at"])]
    return " ".join(part for part in parts if part) or None


def _lease(entry: dict[str, Any]) -> str | None:
    """Who holds the run's lease, and how it stands; a throttled run's limit instead (C5)."""
    lease, holder = entry.get("lease"), entry["lease_holder"]
    if lease == LeaseState.THROTTLED:
        which = entry.get("throttled_by")
        limit = Throttle(which).label.lower() if which in Throttle.values else "its"
        return f"waiting for its {limit} limit"
    if holder is None:
        return None
    if lease == LeaseState.EXPIRED:
        return f"{holder} (expired)"
    return f"{holder} (claimed, not begun)" if lease == LeaseState.CLAIMED else holder


PAUSED_HEADERS = ("QUEUE", "PAUSED BY", "PAUSED AT", "NOTE")


def _paused_queue(entry: dict[str, Any]) -> tuple[Any, ...]:
    return (entry["queue"], entry["paused_by"], _when(entry["paused_at"]), entry["note"])


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
    "LEASE",
)


def render(status: dict[str, Any], cut_at: int | None = None) -> list[str]:
    """The plain-text report of :func:`read_status`; *cut_at* is the limit if runs were cut."""
    lines = [f"now {_when(status['now'])}", "", "Schedules"]
    schedules = [
        (
            entry["job"],
            f"{entry['state']}: {entry['problem']}" if entry["problem"] else entry["state"],
            f"{entry['expression']} ({entry['timezone']})",
            entry["rule"],
            _when(entry["next_due_at"]),
            _paused(entry),
            _last_run(entry),
            "yes" if entry["enabled"] else "disabled",
        )
        for entry in status["schedules"]
    ]
    lines += table(SCHEDULE_HEADERS, schedules) if schedules else ["no schedules"]
    if status.get("paused_queues"):
        lines += ["", "Paused queues (no worker begins a pass of their runs)"]
        lines += table(PAUSED_HEADERS, [_paused_queue(entry) for entry in status["paused_queues"]])
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
            _when(entry["started_at"]),
            _when(entry["next_attempt_at"]),
            _lease(entry),
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
    held = [
        (entry["id"], _in_flight(entry["in_flight"]))
        for entry in status["runs"]
        if entry.get("in_flight")
    ]
    if held:
        lines += ["", "Held runs: the step each pass stopped in (it may have half-happened)"]
        lines += table(("ID", "IN FLIGHT"), held)
    if status["limits"]:
        lines += ["", "Limits (slots in use per key, the rate's next begin)"]
        lines += table(LIMIT_HEADERS, [row for entry in status["limits"] for row in _limits(entry)])
    return lines


def _in_flight(found: dict[str, Any]) -> str:
    """A held run's step in flight, in words: as the admin says it (A8)."""
    if found["step"] is not None:
        return f"step {found['step']}, begun {_when(found['began_at'])}"
    if found["last_completed"] is not None:
        return f"no step in flight: stopped after step {found['last_completed']} completed"
    return "no step had begun when the pass stopped"


LIMIT_HEADERS = ("JOB", "KEY", "CONCURRENCY", "IN USE", "RATE", "NEXT BEGIN", "WAITING")


def _limits(entry: dict[str, Any]) -> list[tuple[Any, ...]]:
    """One row per key of a limited job; a job with no key state yet gets one row."""
    rate = entry["rate"]
    shown_rate = None if rate is None else f"{rate['n']} per {duration(rate['per_seconds'])}"
    keys = entry["keys"] or [{"key": "", "slots_in_use": 0, "next_begin_at": None}]
    return [
        (
            entry["job"],
            key["key"] or ("(each key)" if entry["keyed"] else "(the job)"),
            entry["concurrency"],
            key["slots_in_use"] if entry["concurrency"] else None,
            shown_rate,
            _when(key["next_begin_at"]),
            entry["waiting"] if number == 0 else None,
        )
        for number, key in enumerate(keys)
    ]


class Command(LeaseJobsCommand):
    could_not = "the status could not be read"
    json_help = "Print one JSON object instead of the tables."
    help = (
        "Show django-leasejobs schedules (with their state), paused queues, live runs and "
        "limited jobs' slots and rates, for operators without the admin. Read-only; payloads "
        "are never shown."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument(
            "--job",
            action="append",
            dest="jobs",
            metavar="NAME",
            help="Only this job's schedule and runs (a Django task's: its path); repeat for "
            "several (default: all).",
        )
        parser.add_argument(
            "--limit",
            type=valid_limit,
            default=50,
            metavar="N",
            help="The most live runs listed, newest first (default: %(default)r).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        limit: int = options["limit"]
        status, cut = read_status(options["jobs"], limit)
        if self.as_json:
            self.write_json(status)
        else:
            self.stdout.write("\n".join(render(status, limit if cut else None)))
