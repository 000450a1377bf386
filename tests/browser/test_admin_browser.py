"""The operators' admin (SPEC §8) in a real browser: what an operator sees and does.

Each test logs in through the login form, reads the pages the way an operator
reads them and uses the actions through the change list's action bar. The
screenshots of docs/operators.md are taken here, so the guide shows the admin
as it is.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.utils import timezone

from django_leasejobs import run_due_jobs
from django_leasejobs.models import Run, Schedule
from django_leasejobs.states import FailureCode
from tests.factories import RunFactory

from .seeds import cancelled_cleanup, held_invoice_run, import_in_a_pass, last_nights_run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

RUNS = "/admin/leasejobs/run/"
SCHEDULES = "/admin/leasejobs/schedule/"


def change_page(run: Run) -> str:
    return f"{RUNS}{run.pk}/change/"


def some_history():
    """A few runs of each status, as a site's run list looks on an ordinary day (oldest first)."""
    now = timezone.now()
    cancelled_cleanup(now, by="operator", hours_ago=19)
    last_nights_run(now, cursor="null")
    import_in_a_pass(now, "contacts:eu")


def failed_import():
    """A run that gave up on page 7 of 20: the one the operator retries."""
    now = timezone.now()
    return RunFactory(
        job="tests.walk",
        instance="contacts:us",
        status="failed",
        payload='{"source": "crm", "since": "2026-01-01"}',
        cursor='{"page": 7}',
        counters='{"imported": 700, "skipped": 3}',
        progress_total=2000,
        attempts=3,
        failure_code="handler_failed",
        last_error="ConnectionError: crm.example.com answered 503 Service Unavailable",
        started_at=now - timedelta(minutes=40),
        ended_at=now - timedelta(minutes=2),
    )


# -- 1. a failed run: find it, read it, retry it (A1, A2, A3) ------------------------------


def test_operator_finds_reads_and_retries_a_failed_run(admin):
    some_history()
    failed = failed_import()

    admin.open(RUNS)
    assert len(admin.column("short_id")) == 4
    assert "Failed" in admin.column("status_display")
    admin.screenshot("run-list.png")

    admin.filter("status", "Failed")
    assert admin.column("status_display") == ["Failed"]
    assert admin.column("failure_display") == ["handler_failed"]

    admin.submit(admin.find("th.field-short_id a", within=admin.row(failed.pk)))
    assert admin.field("id") == failed.pk
    assert admin.field("status_display") == "Failed"
    cursor = admin.text(".field-cursor_display pre")
    assert cursor == '{\n  "page": 7\n}'  # decoded and pretty-printed, not the stored text
    assert json.loads(cursor) == {"page": 7}
    assert json.loads(admin.text(".field-counters_display pre")) == {
        "imported": 700,
        "skipped": 3,
    }
    assert json.loads(admin.text(".field-payload_display pre"))["source"] == "crm"
    assert admin.field("failure_display") == "handler_failed"
    assert admin.field("failure_meaning") == FailureCode.HANDLER_FAILED.meaning
    assert "The job's handler raised an exception" in admin.field("failure_meaning")
    assert "503 Service Unavailable" in admin.field("last_error_display")
    assert admin.find(".field-progress_display .leasejobs-progress").get_attribute("title") == (
        "700 / 2000"
    )
    admin.screenshot("run-detail-cursor.png", scroll_to=".object-tools")

    admin.back()
    admin.act("Retry selected runs (as new runs)", failed.pk)
    assert admin.messages("success") == ["1 run started again."]

    again = Run.objects.exclude(pk=failed.pk).get(job="tests.walk", instance="contacts:us")
    assert again.status == "running"
    assert again.decoded_payload().value == {"source": "crm", "since": "2026-01-01"}
    failed.refresh_from_db()
    assert failed.status == "failed"  # a retry is a new run; the failed one stays as it was
    entry = LogEntry.objects.get(object_id=failed.pk)
    assert entry.get_change_message() == f"Retried as run {again.pk}"
    assert entry.user.get_username() == "operator"
    admin.open(f"{RUNS}{failed.pk}/history/")  # and the operator can read it there
    assert f"Retried as run {again.pk}" in admin.text("#change-history")

    admin.open(RUNS)  # the new run is on the list, newest first
    assert admin.column("short_id")[0] == again.pk
    assert admin.text(".field-status_display", within=admin.row(again.pk)) == "Running"


# -- 2. a schedule: pause it with a note, resume it (A5, S4) -------------------------------


def test_operator_pauses_a_schedule_with_a_note_and_resumes_it(admin, define):
    nightly = define(
        "t.browser.nightly", lambda p: p.done(), schedule="0 3 * * *", timezone="Europe/Paris"
    )
    run_due_jobs(jobs=[nightly.name])  # the drive creates the schedule row (S1)
    row = Schedule.objects.get(job="t.browser.nightly")
    note = "CRM maintenance until Monday 08:00 (ticket OPS-812)"

    admin.open(SCHEDULES)
    cells = admin.row(row.pk)
    assert "03:00" in admin.text(".field-cron_display", within=cells)
    assert admin.text(".field-timezone", within=cells) == "Europe/Paris"
    assert admin.text(".field-paused_display", within=cells) == "—"

    admin.act("Pause selected schedules…", row.pk)
    assert "t.browser.nightly (0 3 * * *, Europe/Paris)" in admin.text("#content")
    admin.find("#id_note").send_keys(note)
    admin.submit(admin.find('input[type=submit][name="apply"]'))
    assert admin.messages("success") == ["1 schedule paused."]

    cells = admin.row(row.pk)
    assert admin.text(".field-state_display", within=cells) == "paused"
    paused = admin.text(".field-paused_display", within=cells)
    assert paused.startswith("operator at ")
    assert paused.endswith(f": {note}")
    admin.screenshot("schedule-list.png")
    row.refresh_from_db()
    assert (row.paused_by, row.pause_note) == ("operator", note)
    assert LogEntry.objects.get(object_id=str(row.pk)).get_change_message() == f"Paused: {note}"

    admin.act("Pause selected schedules…", row.pk)  # a second pause answers "already"
    admin.submit(admin.find('input[type=submit][name="apply"]'))
    assert admin.messages("info") == ["0 schedules paused."]
    assert admin.messages("warning") == ["1 schedule left as it was: already paused."]
    row.refresh_from_db()
    assert row.pause_note == note  # the first operator's note stays

    admin.act("Resume selected schedules", row.pk)
    assert admin.messages("success") == ["1 schedule resumed."]
    cells = admin.row(row.pk)
    assert admin.text(".field-paused_display", within=cells) == "—"
    assert admin.text(".field-state_display", within=cells) != "paused"
    row.refresh_from_db()
    assert row.paused_at is None


# -- 3. a held run: it stands out, and is released (A4, A3) --------------------------------


def test_operator_releases_a_held_run(admin):
    some_history()
    held = held_invoice_run()

    admin.open(RUNS)
    assert admin.messages("warning") == [
        "1 run is held and waits for a decision (filter: needs a decision)."
    ]
    admin.filter("needs a decision", "Held runs (1)")
    assert admin.column("short_id") == [held.pk]
    assert admin.column("status_display") == ["Held"]
    assert admin.column("failure_display") == ["interrupted"]
    admin.screenshot("run-held.png")

    admin.act("Release held runs: resume", held.pk)
    assert admin.messages("success") == ["1 run resumed."]
    held.refresh_from_db()
    assert held.status == "running"
    assert held.next_attempt_at is not None  # due again: the next drive picks it up

    admin.open(change_page(held))
    assert admin.field("status_display") == "Running"
    assert admin.find_all(".messagelist li.warning") == []  # nothing waits any more
    assert LogEntry.objects.get(object_id=held.pk).get_change_message() == "Released: resumed"


# -- 4. a malformed row is shown, not crashed on (A2) ----------------------------------------


def test_a_malformed_run_shows_its_raw_text_and_the_decode_error(admin):
    run = RunFactory(
        instance="restored-from-dump",
        payload="{broken",
        cursor="[1,",
        counters='{"imported": 12}',
    )

    admin.open(change_page(run))
    assert admin.http_status() == 200
    assert admin.find("#content h1").text == "View run"

    payload = admin.find(".field-payload_display .leasejobs-decode-error")
    assert "Cannot be decoded:" in payload.text
    assert admin.text("pre", within=payload) == "{broken"
    cursor = admin.find(".field-cursor_display .leasejobs-decode-error")
    assert "Cannot be decoded:" in cursor.text
    assert admin.text("pre", within=cursor) == "[1,"
    assert json.loads(admin.text(".field-counters_display pre")) == {"imported": 12}
    admin.screenshot("run-malformed.png", scroll_to=".object-tools")

    admin.open(RUNS)  # the list shows it too
    assert admin.text(".field-status_display", within=admin.row(run.pk)) == "Running"


# -- 5. user data is text, never markup (A2) -------------------------------------------------


def test_a_payload_holding_a_script_renders_inert(admin):
    script = "<script>window.pwned=1</script>"
    run = RunFactory(
        payload=json.dumps({"name": script}),
        cursor="<script>window.pwned=2</script>",  # not JSON: shown raw, in the decode error
        failure_code="handler_failed",
        last_error='ValueError: <img src=x onerror="window.pwned=3">',
    )

    admin.open(change_page(run))
    assert admin.driver.execute_script("return window.pwned") is None
    assert script in admin.text(".field-payload_display pre")
    assert admin.text(".field-cursor_display .leasejobs-decode-error pre") == (
        "<script>window.pwned=2</script>"
    )
    assert 'onerror="window.pwned=3"' in admin.field("last_error_display")
    assert admin.find_all(".field-payload_display script, .field-cursor_display script") == []
    assert admin.find_all(".field-last_error_display img") == []

    admin.open(RUNS)
    assert admin.driver.execute_script("return window.pwned") is None
