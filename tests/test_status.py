"""``manage.py leasejobs_status``: schedules with their S6 state, and live runs."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import OperationalError

from django_leasejobs import RunStatus, pause, run_due_jobs
from django_leasejobs.management.commands import leasejobs_status
from django_leasejobs.models import Schedule
from tests.factories import RunFactory, ScheduleFactory
from tests.utils import as_json, status

pytestmark = pytest.mark.django_db

NOON = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SECRET = "sk_live_4f9a2c7e1b3d5f60aa91"


@pytest.fixture
def scheduled(define, frozen_clock):
    """Define hourly UTC jobs and drive once at noon, which creates their Schedule rows."""

    def make(*names):
        for name in names:
            define(name, lambda p: p.done(), schedule="0 * * * *", timezone="UTC")
        run_due_jobs(jobs=list(names))

    return make


def line_of(output, first_cell, table=None):
    """The table line whose first cell is *first_cell* (in the table titled *table*)."""
    if table is not None:
        output = output[output.index(f"\n{table}") :].split("\n\n")[0]
    else:  # the first table that has one: a held run's id is in two (A8)
        output = "\n\n".join(
            block
            for block in output.split("\n\n")
            if not block.startswith("Held runs: the step each pass stopped in")
        )
    (line,) = [line for line in output.splitlines() if line.split("  ")[0] == first_cell]
    return line


def held_run(job="t.status", **fields):
    values = {
        "status": RunStatus.HELD,
        "attempts": 3,
        "failure_code": "handler_failed",
        "started_at": NOON - timedelta(minutes=5),
        "cursor": '{"page": 7}',
        "payload": json.dumps({"api_key": SECRET}),
    }
    return RunFactory(job=job, **(values | fields))


def test_the_table_lists_a_schedule_with_its_state_and_next_due(scheduled):
    scheduled("t.status")
    output = status()
    row = line_of(output, "t.status")
    assert "never_run" in row
    assert "0 * * * * (UTC)" in row
    assert "catch_up_once" in row
    assert "2026-03-01 13:00:00 UTC" in row  # as the admin writes times (A8)
    assert row.endswith("yes")
    assert output.startswith("now 2026-03-01 12:00:00 UTC\n")
    assert "no live runs" in output


def test_columns_are_as_wide_as_their_content(scheduled):
    scheduled("t.status", "t.status.with.a.much.longer.name")
    lines = status().splitlines()
    header = next(line for line in lines if line.startswith("JOB "))
    column = header.index("STATE")
    for job in ("t.status", "t.status.with.a.much.longer.name"):
        row = line_of("\n".join(lines), job)
        assert row[column:].startswith("never_run")
        assert row[column - 2 : column] == "  "
    assert column == len("t.status.with.a.much.longer.name") + 2


def test_a_paused_schedule_reads_paused_with_who_and_why(scheduled):
    scheduled("t.status")
    pause("t.status", by="alice", note="deploy freeze\nuntil Monday")
    output = status()
    row = line_of(output, "t.status")
    assert " paused " in row
    assert "alice: deploy freeze until Monday" in row  # one line, whatever the note holds
    entry = as_json()["schedules"]
    (paused,) = [item for item in entry if item["job"] == "t.status"]
    assert paused["state"] == "paused"
    assert paused["paused"] is True
    assert (paused["paused_by"], paused["pause_note"]) == ("alice", "deploy freeze\nuntil Monday")
    assert paused["paused_at"] == "2026-03-01T12:00:00+00:00"


@pytest.mark.parametrize(
    ("attempts", "age", "expected"),
    [(0, timedelta(minutes=1), "running"), (2, timedelta(minutes=1), "retrying")],
)
def test_a_live_run_gives_its_schedule_state(scheduled, attempts, age, expected):
    scheduled("t.status")
    RunFactory(job="t.status", instance="default", attempts=attempts, started_at=NOON - age)
    assert f"  {expected}  " in line_of(status(), "t.status")


def test_a_run_live_longer_than_stall_after_reads_stalled(scheduled):
    scheduled("t.status")
    held_run(started_at=NOON - timedelta(minutes=16))  # STALL_AFTER is 15 minutes
    assert "  stalled  " in line_of(status(), "t.status")


def test_a_disabled_schedule_says_so_and_comes_after_the_enabled(scheduled):
    scheduled("t.status")
    ScheduleFactory(job="a.gone", expression="0 3 * * *", enabled=False, next_due_at=None)
    output = status()
    assert line_of(output, "a.gone").endswith("disabled")
    assert output.index("t.status") < output.index("a.gone")
    jobs = [entry["job"] for entry in as_json()["schedules"]]
    assert jobs.index("t.status") < jobs.index("a.gone")


def test_a_live_held_run_is_listed(scheduled):
    scheduled("t.status")
    run = held_run()
    output = status()
    row = line_of(output, run.id)
    for cell in ("t.status", run.instance, "held", "3", "handler_failed", '{"page": 7}'):
        assert f"  {cell}" in row
    assert "2026-03-01 11:55:00 UTC" in row  # started
    assert "no live runs" not in output


def test_finished_runs_are_not_listed(scheduled):
    scheduled("t.status")
    done = RunFactory(job="t.status", status=RunStatus.DONE, started_at=NOON)
    assert done.id not in status()
    assert as_json()["runs"] == []


def test_the_lease_holder_is_shown_while_leased(frozen_clock):
    leased = RunFactory(
        job="t.status",
        started_at=NOON,
        next_attempt_at=NOON + timedelta(minutes=5),
        lease_owner="01JOWNER0000000000000000AA",
        lease_holder="web-1:4242:1700000000:ns",
        lease_began_at=NOON,
    )
    expired = RunFactory(
        job="t.status",
        started_at=NOON - timedelta(minutes=1),
        next_attempt_at=NOON - timedelta(seconds=1),
        lease_owner="01JOWNER0000000000000000BB",
        lease_holder="web-2:99:1700000000:ns",
    )
    released = RunFactory(
        job="t.status",
        started_at=NOON - timedelta(minutes=2),
        lease_holder="web-3:7:1700000000:ns",  # the last claimer, lease released
    )
    output = status()
    assert line_of(output, leased.id).endswith("web-1:4242:1700000000:ns")
    assert line_of(output, expired.id).endswith("web-2:99:1700000000:ns (expired)")
    assert "web-3" not in line_of(output, released.id)
    runs = {entry["id"]: entry for entry in as_json()["runs"]}
    assert runs[leased.id]["lease_holder"] == "web-1:4242:1700000000:ns"
    assert runs[leased.id]["lease"] == "leased"
    assert runs[leased.id]["lease_expired"] is False
    assert runs[expired.id]["lease"] == "expired"
    assert runs[expired.id]["lease_expired"] is True
    assert (runs[released.id]["lease_holder"], runs[released.id]["lease_expired"]) == (None, None)


def test_a8_a_claim_not_yet_begun_says_so(frozen_clock):
    claimed = RunFactory(
        job="t.status",
        next_attempt_at=NOON + timedelta(minutes=5),
        lease_owner="01JOWNER0000000000000000AA",
        lease_holder="web-1:4242:1700000000:ns",
    )
    assert line_of(status(), claimed.id).endswith("web-1:4242:1700000000:ns (claimed, not begun)")
    assert as_json()["runs"][0]["lease"] == "claimed"


@pytest.mark.parametrize(("db_offset", "expected"), [(-1, "leased"), (+1, "expired")])
def test_a8_a_lease_is_judged_on_the_databases_clock_not_this_machines(
    frozen_clock, db_offset, expected
):
    """The database's clock a day off this machine's: the lease is as the database says (L1)."""
    now = datetime.now(UTC)
    frozen_clock.set(now + timedelta(days=db_offset))  # the database's "now"
    run = RunFactory(
        job="t.status",
        next_attempt_at=now,  # by this machine's clock, expiring this instant
        lease_owner="01JOWNER0000000000000000AA",
        lease_holder="web-1:4242:1700000000:ns",
        lease_began_at=now - timedelta(minutes=1),
    )
    (entry,) = as_json()["runs"]
    assert (entry["lease"], entry["lease_expired"]) == (expected, expected == "expired")
    assert line_of(status(), run.id).endswith("(expired)") == (expected == "expired")


@pytest.mark.parametrize(
    ("which", "words"),
    [("rate", "waiting for its rate limit"), ("concurrency", "waiting for its concurrency limit")],
)
def test_a8_c5_a_throttled_run_reads_as_waiting_for_its_limit_never_as_claimed(
    frozen_clock, which, words
):
    waiting = RunFactory(job="tests.limited", throttled_by=which)
    claimed_again = RunFactory(  # a drive asking the limit again: its claim is no pass
        job="tests.limited",
        throttled_by=which,
        next_attempt_at=NOON + timedelta(seconds=30),
        lease_owner="01JOWNER0000000000000000AA",
        lease_holder="vm:21870:1700000000:ns",
    )
    output = status()
    for run in (waiting, claimed_again):
        assert line_of(output, run.id).endswith(words)
    assert "vm:21870" not in output
    runs = {entry["id"]: entry for entry in as_json()["runs"]}
    assert runs[claimed_again.id]["lease"] == "throttled"
    assert runs[claimed_again.id]["throttled_by"] == which
    assert runs[claimed_again.id]["lease_holder"] is None


def test_a8_each_held_run_is_listed_with_the_step_its_pass_stopped_in(frozen_clock):
    from tests.factories import StepFactory

    in_step, between, before = held_run(), held_run(), held_run()
    StepFactory(run=in_step, name="reserve:102", result="true", recorded_at=NOON)
    StepFactory(run=in_step, name="charge:102", result=None, attempts=0, began_at=NOON)
    StepFactory(run=between, name="reserve:7", result="true", recorded_at=NOON)
    running = RunFactory(job="t.status")
    output = status()
    table = "Held runs: the step each pass stopped in (it may have half-happened)"
    assert line_of(output, in_step.id, table).endswith(
        "step charge:102, begun 2026-03-01 12:00:00 UTC"
    )
    assert line_of(output, between.id, table).endswith(
        "no step in flight: stopped after step reserve:7 completed"
    )
    assert line_of(output, before.id, table).endswith("no step had begun when the pass stopped")
    assert running.id not in output[output.index(table) :]
    runs = {entry["id"]: entry for entry in as_json()["runs"]}
    assert runs[in_step.id]["in_flight"] == {
        "step": "charge:102",
        "began_at": "2026-03-01T12:00:00+00:00",
        "last_completed": None,
    }
    assert runs[between.id]["in_flight"]["last_completed"] == "reserve:7"
    assert runs[running.id]["in_flight"] is None  # only a held run has one


def test_json_parses_and_holds_the_same(scheduled):
    scheduled("t.status")
    run = held_run()
    data = as_json()
    assert set(data) == {"now", "schedules", "runs", "stranded", "limits"}
    assert data["now"] == "2026-03-01T12:00:00+00:00"
    (schedule,) = [entry for entry in data["schedules"] if entry["job"] == "t.status"]
    # The held run is live, with attempts, 5 minutes old.
    assert schedule.pop("state") == "retrying"
    assert schedule == {
        "job": "t.status",
        "problem": None,
        "enabled": True,
        "expression": "0 * * * *",
        "timezone": "UTC",
        "rule": "catch_up_once",
        "next_due_at": "2026-03-01T13:00:00+00:00",
        "paused": False,
        "paused_at": None,
        "paused_by": None,
        "pause_note": None,
        "last_run": None,
        "last_outcome": None,
        "last_run_at": None,
        "last_success_at": None,
    }
    assert data["runs"] == [
        {
            "id": run.id,
            "job": "t.status",
            "instance": run.instance,
            "status": "held",
            "attempts": 3,
            "failure_code": "handler_failed",
            "cursor": '{"page": 7}',
            "started_at": "2026-03-01T11:55:00+00:00",
            "next_attempt_at": None,
            "lease": "free",
            "lease_holder": None,
            "lease_expired": None,
            "throttled_by": None,
            "in_flight": {"step": None, "began_at": None, "last_completed": None},
        }
    ]


def test_the_last_run_is_shown(scheduled, frozen_clock):
    scheduled("t.status")
    frozen_clock.set(NOON + timedelta(hours=1))
    run_due_jobs(jobs=["t.status"])  # fires the 13:00 due time; the run completes
    schedule = Schedule.objects.get(job="t.status")
    assert schedule.last_run_id is not None
    row = line_of(status(), "t.status")
    assert f"{schedule.last_run_id} done 2026-03-01 13:00:00 UTC" in row
    assert "  ok  " in row


def test_job_filters_both_tables(scheduled):
    scheduled("t.status", "t.other")
    mine, theirs = held_run(), held_run(job="t.other")
    output = status("--job", "t.status")
    assert "t.status" in output
    assert "t.other" not in output
    assert "tests.nightly" not in output  # a scheduled job of tests/jobs.py
    assert mine.id in output
    assert theirs.id not in output
    data = as_json("--job", "t.other", "--job", "t.status")
    assert sorted(entry["job"] for entry in data["schedules"]) == ["t.other", "t.status"]
    assert sorted(entry["id"] for entry in data["runs"]) == sorted([mine.id, theirs.id])
    assert as_json("--job", "t.nobody") == {**data, "schedules": [], "runs": []}


def test_an_empty_database(frozen_clock):
    output = status()
    assert output.startswith(
        "now 2026-03-01 12:00:00 UTC\n\nSchedules\nno schedules\n\n"
        "Live runs (newest first)\nno live runs\n\nLimits"
    )
    # The limited jobs tests/jobs.py registers, none of them with a slot in use yet (C5).
    assert line_of(output, "tests.limited").split() == [
        "tests.limited",
        *("(the", "job)"),
        *("2", "0", "—", "—", "0"),
    ]
    data = as_json()
    limits = {entry["job"]: entry for entry in data.pop("limits")}
    assert data == {"now": "2026-03-01T12:00:00+00:00", "schedules": [], "runs": [], "stranded": []}
    assert limits["tests.limited"] == {
        "job": "tests.limited",
        "concurrency": 2,
        "rate": None,
        "keyed": False,
        "waiting": 0,
        "keys": [],
    }
    assert limits["tests.limited.keyed"]["keyed"] is True
    assert limits["tests.rated"]["rate"] == {"n": 5, "per_seconds": 2.0}


def test_c5_limits_show_slots_in_use_per_key_the_rates_next_begin_and_who_waits(frozen_clock):
    from django_leasejobs.models import RateState, Slot

    holder = RunFactory(
        job="tests.limited.keyed",
        limit_key="acme",
        lease_owner="01M8S15RA65SX96HXJYXYAFX19",
        lease_began_at=NOON,
        next_attempt_at=NOON + timedelta(seconds=30),
    )
    Slot.objects.create(
        job=holder.job, key="acme", number=0, run_id=holder.pk, owner=holder.lease_owner
    )
    Slot.objects.create(job=holder.job, key="acme", number=1)  # free
    RunFactory(job="tests.limited.keyed", limit_key="acme", throttled_by="concurrency")
    RateState.objects.create(job="tests.rated", key="", tat=NOON + timedelta(seconds=2))
    limits = {entry["job"]: entry for entry in as_json()["limits"]}
    keyed = limits["tests.limited.keyed"]
    assert keyed["waiting"] == 1
    assert keyed["keys"] == [{"key": "acme", "slots_in_use": 1, "next_begin_at": None}]
    rated = limits["tests.rated"]["keys"]
    assert rated == [{"key": "", "slots_in_use": 0, "next_begin_at": "2026-03-01T12:00:02+00:00"}]
    output = status()
    assert line_of(output, "tests.limited.keyed").split()[:5] == [
        "tests.limited.keyed",
        "acme",
        "2",
        "1",
        "—",
    ]
    assert "2026-03-01 12:00:02 UTC" in line_of(output, "tests.rated")
    assert "5 per 2 s" in line_of(output, "tests.rated")  # a duration as the admin writes one


def test_the_payload_never_appears(scheduled):
    scheduled("t.status")
    held_run(rerun_payload=json.dumps({"api_key": SECRET}), rerun_requested=True)
    RunFactory(job="t.status", started_at=NOON, payload=json.dumps({"password": SECRET}))
    for output in (status(), status("--json"), status("--job", "t.status")):
        assert SECRET not in output
        assert "api_key" not in output
        assert "password" not in output


def test_the_cursor_is_cut_to_40_characters(frozen_clock):
    cursor = json.dumps({"after": "x" * 100})
    run = RunFactory(job="t.status", started_at=NOON, cursor=cursor)
    (entry,) = as_json()["runs"]
    assert entry["cursor"] == cursor[:39] + "…"
    assert len(entry["cursor"]) == 40
    assert f"  {cursor[:39]}…  " in line_of(status(), run.id)


def test_runs_newest_first_at_most_limit(frozen_clock):
    runs = [RunFactory(job="t.status", started_at=NOON - timedelta(minutes=n)) for n in range(4)]
    assert [entry["id"] for entry in as_json()["runs"]] == [run.id for run in runs]
    assert [entry["id"] for entry in as_json("--limit", "2")["runs"]] == [
        runs[0].id,
        runs[1].id,
    ]
    output = status("--limit", "2")
    assert runs[2].id not in output
    assert "(more than 2 live runs: --limit N shows more)" in output
    assert "more than" not in status("--limit", "4")


@pytest.mark.parametrize("value", ["0", "-1", "x", "10001"])
def test_an_invalid_limit_is_refused(value):
    with pytest.raises(CommandError):
        call_command("leasejobs_status", "--limit", value)


def test_a_database_error_is_a_one_line_command_error(monkeypatch, scheduled):
    scheduled("t.status")

    def broken(jobs):
        raise OperationalError("server closed the connection\nunexpectedly")

    monkeypatch.setattr("django_leasejobs.status_report.live_runs", broken)
    with pytest.raises(CommandError) as info:
        call_command("leasejobs_status")
    assert str(info.value) == (
        "the status could not be read: OperationalError: server closed the connection unexpectedly"
    )


def test_wide_characters_keep_columns_aligned():
    lines = leasejobs_status.table(("A", "B"), [("日本", "x"), ("ab", "y"), (None, "z")])
    assert lines == ["A     B", "日本  x", "ab    y", "—     z"]


# -- rows this process cannot read or plan (§11, §12, D6) ------------------------------


@pytest.mark.parametrize(
    ("broken", "reason"),
    [
        ({"timezone": "Europe/Atlantis"}, "unknown time zone 'Europe/Atlantis'"),
        ({"expression": "0 0 30 2 *"}, "cron expression '0 0 30 2 *' cannot be planned"),
    ],
)
def test_s6_a_schedule_this_process_cannot_plan_reads_invalid_with_the_reason(
    scheduled, broken, reason
):
    scheduled("t.status")
    # Another deployment wrote it: newer tzdata, or an expression this one refuses.
    Schedule.objects.filter(job="t.status").update(last_run_at=NOON, **broken)
    (entry,) = [e for e in as_json()["schedules"] if e["job"] == "t.status"]
    assert (entry["state"], entry["problem"]) == ("invalid", reason)
    assert f"invalid: {reason}" in line_of(status(), "t.status")


def test_s11_stranded_runs_are_listed_with_why(scheduled):
    from django_leasejobs.models import Run

    never_due = held_run(status=RunStatus.RUNNING, next_attempt_at=None)
    odd = held_run(instance="odd")
    Run.objects.filter(pk=odd.pk).update(status="paused")
    stranded = {entry["id"]: entry["why"] for entry in as_json()["stranded"]}
    assert set(stranded) == {never_due.id, odd.id}
    output = status()
    stranded_table = output.split("Stranded or unreadable runs")[1]
    assert "never due" in line_of(stranded_table, never_due.id)


def test_r9_a_live_run_the_database_cannot_hand_back_is_listed_as_unreadable():
    from django.db import connection

    readable = held_run(instance="fine")
    broken = held_run(instance="broken")
    column = connection.ops.quote_name("cursor")
    if connection.vendor == "sqlite":
        sql = f"UPDATE leasejobs_run SET {column} = CAST(X'22C3A922FF' AS TEXT) WHERE id = %s"
    elif connection.vendor == "postgresql":
        sql = (
            "UPDATE leasejobs_run SET started_at = started_at + interval '8000 years' WHERE id = %s"
        )
    else:  # MariaDB refuses to store what it cannot return; a readable oddity instead
        sql = f"UPDATE leasejobs_run SET {column} = '{{broken' WHERE id = %s"
    with connection.cursor() as cursor:
        cursor.execute(sql, [broken.pk])
    runs = {entry["id"]: entry for entry in as_json()["runs"]}
    assert runs[readable.id]["status"] == "held"
    if connection.vendor == "mysql":
        assert runs[broken.id]["cursor"] == "{broken"
    else:
        assert runs[broken.id]["unreadable"].startswith(("the stored", "a stored value"))
        stranded_table = status().split("Stranded or unreadable runs")[1]
        assert "cannot be read" in line_of(stranded_table, broken.id)
