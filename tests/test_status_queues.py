"""``manage.py leasejobs_status`` lists each paused queue with who paused it, when, and
the note (SPEC W6), in the tables and under its own key of ``--json``."""

from __future__ import annotations

import pytest

from django_leasejobs import pause_queue, resume_queue
from tests.utils import as_json, status

pytestmark = pytest.mark.django_db

#: The keys of --json before W6: a status without paused queues keeps exactly these.
KEYS = {"now", "schedules", "runs", "stranded", "limits"}


def test_w6_the_table_lists_each_paused_queue_with_who_when_and_the_note(frozen_clock):
    assert pause_queue("mail", by="alice", note="SMTP relay down")
    assert pause_queue("reports", by="bob")
    lines = status().splitlines()
    at = lines.index("Paused queues (no worker begins a pass of their runs)")
    assert lines[at + 1 : at + 4] == [
        "QUEUE    PAUSED BY  PAUSED AT                NOTE",
        "mail     alice      2026-03-01 12:00:00 UTC  SMTP relay down",
        "reports  bob        2026-03-01 12:00:00 UTC  —",
    ]
    # Between the schedules and the live runs: what explains a queue whose runs do not move.
    assert lines.index("Schedules") < at < lines.index("Live runs (newest first)")


def test_w6_json_lists_the_paused_queues_under_their_own_key_the_others_unchanged(frozen_clock):
    before = as_json()
    assert set(before) == KEYS  # nothing paused: the keys as they were
    assert pause_queue("mail", by="alice", note="SMTP relay down\nback at 14:00")
    assert pause_queue("reports", by="bob")
    after = as_json()
    assert set(after) == {*KEYS, "paused_queues"}
    assert after["paused_queues"] == [
        {
            "queue": "mail",
            "paused_by": "alice",
            "paused_at": "2026-03-01T12:00:00+00:00",
            "note": "SMTP relay down\nback at 14:00",  # as written, as a pause note is
        },
        {
            "queue": "reports",
            "paused_by": "bob",
            "paused_at": "2026-03-01T12:00:00+00:00",
            "note": None,
        },
    ]
    assert {key: after[key] for key in KEYS} == before


def test_w6_a_note_with_a_line_break_is_one_line_of_the_table(frozen_clock):
    pause_queue("mail", by="alice", note="SMTP relay down\nback at 14:00")
    (line,) = [line for line in status().splitlines() if line.startswith("mail ")]
    assert line.endswith("SMTP relay down back at 14:00")


def test_w6_a_resumed_queue_is_no_longer_listed(frozen_clock):
    pause_queue("mail", by="alice")
    resume_queue("mail", by="alice")
    assert "Paused queues" not in status()
    assert "paused_queues" not in as_json()


def test_w6_paused_queues_are_listed_whatever_job_is_asked_for(frozen_clock):
    pause_queue("mail", by="alice")
    assert [entry["queue"] for entry in as_json("--job", "t.nobody")["paused_queues"]] == ["mail"]
    assert "Paused queues" in status("--job", "t.nobody")
