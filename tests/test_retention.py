"""S7: retention deletes finished runs, their steps and old missed records, in batches."""

from __future__ import annotations

import json
import logging
import re
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import OperationalError, connection, models
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_leasejobs.conf import conf
from django_leasejobs.models import (
    Missed,
    PassStat,
    PassStatHalfHour,
    Run,
    Schedule,
    Step,
    TaskAttempt,
)
from django_leasejobs.retention import PruneReport, prune, prune_stats
from django_leasejobs.states import LIVE_STATUSES, RunStatus
from tests.factories import MissedFactory, RunFactory, ScheduleFactory, StepFactory
from tests.utils import flushed_stat, relations_to, statements

DAY = timedelta(days=1)
MINUTE = timedelta(minutes=1)
FINISHED = [RunStatus.DONE, RunStatus.FAILED, RunStatus.CANCELLED]


def finished_run(ended_at, status=RunStatus.DONE, steps=0):
    run = RunFactory(status=status, started_at=ended_at - timedelta(hours=1), ended_at=ended_at)
    for _ in range(steps):
        StepFactory(run=run, recorded_at=ended_at)
    return run


def missed(job, recorded_at, run=None):
    return MissedFactory(
        job=job, due_at=recorded_at - timedelta(minutes=10), run=run, recorded_at=recorded_at
    )


def schedule(job, last_run):
    return ScheduleFactory(job=job, expression="* * * * *", last_run=last_run)


def deletes_on(model, captured):
    """The DELETE statements a capture saw on *model*'s table (any quoting)."""
    table = re.compile(rf"^DELETE FROM [`\"]?{model._meta.db_table}[`\"]?\s", re.IGNORECASE)
    return [sql for sql in statements(captured) if table.match(sql)]


@pytest.mark.django_db
@pytest.mark.parametrize("status", FINISHED)
def test_s7_prune_deletes_only_finished_runs_older_than_the_cutoff(frozen_clock, status):
    now = frozen_clock.now()
    old = finished_run(now - 31 * DAY, status, steps=2)
    new = finished_run(now - 29 * DAY, status, steps=2)

    report = prune()

    assert report == PruneReport(runs=1, steps=2, missed=0, cutoff=now - 30 * DAY)
    assert not Run.objects.filter(pk=old.pk).exists()
    assert not Step.objects.filter(run_id=old.pk).exists()
    assert Run.objects.filter(pk=new.pk).exists()
    assert Step.objects.filter(run_id=new.pk).count() == 2


@pytest.mark.django_db
def test_s7_the_cutoff_is_strict_and_follows_older_than(frozen_clock):
    now = frozen_clock.now()
    at_cutoff = finished_run(now - 7 * DAY)
    before = finished_run(now - 7 * DAY - timedelta(seconds=1))

    report = prune(older_than=7 * DAY)

    assert report.cutoff == now - 7 * DAY
    assert report.runs == 1
    assert list(Run.objects.values_list("pk", flat=True)) == [at_cutoff.pk]
    assert not Run.objects.filter(pk=before.pk).exists()


@pytest.mark.django_db
def test_s7_the_default_is_the_retention_setting(frozen_clock):
    now = frozen_clock.now()
    finished_run(now - 8 * DAY)
    kept = finished_run(now - 6 * DAY)
    clock_path = "django_leasejobs.clock.FrozenClock"
    with override_settings(LEASEJOBS={"CLOCK": clock_path, "RETENTION": 7 * DAY}):
        report = prune()
    assert report.cutoff == now - 7 * DAY
    assert report.runs == 1
    assert list(Run.objects.values_list("pk", flat=True)) == [kept.pk]


@pytest.mark.django_db
@pytest.mark.parametrize("status", sorted(LIVE_STATUSES))
def test_s7_live_runs_are_never_pruned_whatever_their_age(frozen_clock, status):
    ancient = frozen_clock.now() - 3650 * DAY
    live = RunFactory(status=status, started_at=ancient)
    StepFactory(run=live, recorded_at=ancient)
    # Even a live row carrying an end time (a hand-edited restore) is not finished.
    odd = RunFactory(status=status, started_at=ancient, ended_at=ancient)

    report = prune(older_than=timedelta(0))

    assert (report.runs, report.steps) == (0, 0)
    assert set(Run.objects.values_list("pk", flat=True)) == {live.pk, odd.pk}
    assert Step.objects.filter(run_id=live.pk).count() == 1


@pytest.mark.django_db
def test_s7_a7_a_run_cancelled_while_its_pass_is_in_flight_keeps_its_key_through_a_prune(
    frozen_clock,
):
    """§3 ``cancel`` + A7: a cancelled run whose pass may still run keeps its key until that
    pass stops; pruning it would free the key under the pass, as Delete did (issue 18)."""
    ancient = frozen_clock.now() - 3650 * DAY
    stopping = RunFactory(
        status=RunStatus.CANCELLED,
        started_at=ancient,
        ended_at=ancient,
        live_key="t.prune.cancelled|default",
        lease_owner="the-pass-in-flight",
        next_attempt_at=frozen_clock.now() + timedelta(minutes=5),
    )

    report = prune(older_than=timedelta(0))

    assert report.runs == 0
    assert Run.objects.filter(pk=stopping.pk, live_key__isnull=False).exists()


@pytest.mark.django_db
def test_s7_missed_records_older_than_the_cutoff_are_deleted(frozen_clock):
    now = frozen_clock.now()
    old = [missed("tests.cron", now - 40 * DAY + n * timedelta(minutes=1)) for n in range(3)]
    new = missed("tests.cron", now - 29 * DAY)

    report = prune(batch_size=2)

    assert report.missed == 3
    assert not Missed.objects.filter(pk__in=[m.pk for m in old]).exists()
    assert list(Missed.objects.values_list("pk", flat=True)) == [new.pk]


@pytest.mark.django_db
def test_s7_prune_deletes_in_batches_of_at_most_batch_size(frozen_clock):
    old = frozen_clock.now() - 60 * DAY
    for _ in range(10):
        finished_run(old, steps=2)
    kept = finished_run(frozen_clock.now())

    with CaptureQueriesContext(connection) as captured:
        report = prune(batch_size=3)

    assert (report.runs, report.steps) == (10, 20)
    assert list(Run.objects.values_list("pk", flat=True)) == [kept.pk]
    assert not Step.objects.exclude(run_id=kept.pk).exists()
    run_deletes = deletes_on(Run, captured)
    assert len(run_deletes) == 4  # 3 + 3 + 3 + 1; the short batch ends the loop
    assert len(deletes_on(Step, captured)) == 4
    # The steps go by run key, never loaded first (no delete collector).
    step_table = Step._meta.db_table
    assert not [
        sql for sql in statements(captured) if sql.startswith("SELECT") and step_table in sql
    ]


@pytest.mark.django_db
def test_s7_each_batch_is_a_fixed_number_of_statements_whatever_the_runs_hold(frozen_clock):
    old = frozen_clock.now() - 60 * DAY

    def statements_to_prune(steps):
        for _ in range(6):
            finished_run(old, steps=steps)
        with CaptureQueriesContext(connection) as captured:
            assert prune(batch_size=3).runs == 6
        return statements(captured)

    bare = statements_to_prune(0)
    heavy = statements_to_prune(5)
    assert len(bare) == len(heavy)
    # Missed: one short select. Runs: per full batch select, unlink schedules and
    # missed records, delete steps and task attempts, delete runs; then one
    # short select. Then two deletes of idle flow-control state (§14), and one
    # update disables orphaned schedules (S1).
    assert len(heavy) == 1 + 2 * 6 + 1 + 2 + 1


@pytest.mark.django_db
def test_s7_a_batch_fits_the_backends_parameter_limit(frozen_clock, monkeypatch):
    old = frozen_clock.now() - 60 * DAY
    for _ in range(10):
        finished_run(old, steps=1)
    # SQLite 3.31, the oldest Django supports, takes 999 parameters per statement.
    # A class attribute, a property or a cached_property (PostgreSQL on Django
    # 6.1+): replaced on the class, and any value cached on the instance dropped.
    monkeypatch.setattr(type(connection.features), "max_query_params", 20)
    monkeypatch.delitem(connection.features.__dict__, "max_query_params", raising=False)

    with CaptureQueriesContext(connection) as captured:
        report = prune(batch_size=1000)

    assert (report.runs, report.steps) == (10, 10)
    assert len(deletes_on(Run, captured)) == 3  # 4 + 4 + 2 keys
    assert prune(batch_size=1000).runs == 0


@pytest.mark.django_db(transaction=True)
def test_s7_each_batch_commits_on_its_own(frozen_clock):
    old = frozen_clock.now() - 60 * DAY
    runs = [finished_run(old, steps=1) for _ in range(6)]
    run_delete = re.compile(rf"^DELETE FROM [`\"]?{Run._meta.db_table}[`\"]?\s", re.IGNORECASE)
    seen = []

    def fail_second_run_delete(execute, sql, params, many, context):
        if run_delete.match(sql):
            seen.append(sql)
            if len(seen) == 2:
                raise OperationalError("connection lost")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(fail_second_run_delete), pytest.raises(OperationalError):
        prune(batch_size=3)

    # The first batch stayed deleted; the failed one rolled back whole, steps included.
    remaining = sorted(Run.objects.values_list("pk", flat=True))
    assert remaining == sorted(run.pk for run in runs[3:])
    assert Step.objects.count() == 3


@pytest.mark.django_db
def test_s7_dry_run_deletes_nothing_and_reports_counts(frozen_clock):
    now = frozen_clock.now()
    for status in FINISHED:
        finished_run(now - 31 * DAY, status, steps=2)
    finished_run(now - DAY, steps=1)
    RunFactory(status=RunStatus.HELD, started_at=now - 400 * DAY)
    missed("tests.cron", now - 31 * DAY)
    missed("tests.cron", now - DAY)

    with CaptureQueriesContext(connection) as captured:
        report = prune(dry_run=True)

    assert report == PruneReport(runs=3, steps=6, missed=1, cutoff=now - 30 * DAY, dry_run=True)
    assert not [sql for sql in statements(captured) if not sql.startswith("SELECT")]
    assert Run.objects.count() == 5
    assert Step.objects.count() == 7
    assert Missed.objects.count() == 2


@pytest.mark.django_db
def test_s7_a_schedule_whose_last_run_is_pruned_keeps_existing_with_last_run_null(frozen_clock):
    now = frozen_clock.now()
    pruned = finished_run(now - 31 * DAY)
    recent = finished_run(now - DAY)
    nightly = schedule("tests.nightly", last_run=pruned)
    hourly = schedule("tests.hourly", last_run=recent)
    # A missed record newer than the cutoff may point at a run older than it.
    served = missed("tests.nightly", now - DAY, run=pruned)

    assert prune(batch_size=1).runs == 1

    nightly.refresh_from_db()
    hourly.refresh_from_db()
    served.refresh_from_db()
    assert nightly.last_run_id is None
    assert hourly.last_run_id == recent.pk
    assert served.run_id is None


def test_s7_prune_handles_every_relation_to_run():
    # The run delete bypasses Django's collector, so a new foreign key to Run
    # must be handled in retention.py (or the delete fails on the constraint).
    assert relations_to(Run) == {
        (Step, "run", models.CASCADE),
        (TaskAttempt, "run", models.CASCADE),
        (Schedule, "last_run", models.SET_NULL),
        (Missed, "run", models.SET_NULL),
    }
    assert not [f for f in Step._meta.get_fields(include_hidden=True) if not f.concrete]
    assert not [f for f in Missed._meta.get_fields(include_hidden=True) if not f.concrete]


@pytest.mark.django_db
def test_s7_prune_on_the_database_clock():
    old = finished_run(timezone.now() - 400 * DAY, steps=1)
    recent = finished_run(timezone.now() - DAY)

    report = prune()

    assert (report.runs, report.steps) == (1, 1)
    assert abs(report.cutoff - (timezone.now() - 30 * DAY)) < timedelta(minutes=5)
    assert not Run.objects.filter(pk=old.pk).exists()
    assert Run.objects.filter(pk=recent.pk).exists()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"older_than": -DAY}, "older_than"),
        ({"batch_size": 0}, "batch_size"),
    ],
)
def test_s7_bad_arguments_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        prune(**options)


@pytest.mark.django_db
def test_s7_prune_logs_counts_only(frozen_clock, caplog):
    run = finished_run(frozen_clock.now() - 31 * DAY, steps=1)
    with caplog.at_level(logging.INFO, logger="django_leasejobs"):
        prune()
    (record,) = [r for r in caplog.records if r.name == "django_leasejobs"]
    assert record.levelno == logging.INFO
    assert "runs=1 steps=1 missed=0" in record.getMessage()
    assert run.pk not in record.getMessage()


# -- The command --------------------------------------------------------------


@pytest.mark.django_db
def test_s7_command_prints_one_summary_line(frozen_clock, capsys):
    now = frozen_clock.now()
    finished_run(now - 31 * DAY, steps=2)
    finished_run(now - DAY)
    missed("tests.cron", now - 31 * DAY)

    call_command("leasejobs_prune")

    out = capsys.readouterr().out
    assert out.splitlines() == [
        f"deleted runs=1 steps=2 missed=1 disabled schedules=0 "
        f"cutoff={(now - 30 * DAY).isoformat()}"
    ]
    assert Run.objects.count() == 1


@pytest.mark.django_db
def test_s7_command_json_dry_run_and_older_than(frozen_clock, capsys):
    now = frozen_clock.now()
    finished_run(now - 3 * DAY, steps=1)
    finished_run(now - DAY)

    call_command("leasejobs_prune", "--json", "--dry-run", "--older-than", "2.5")

    report = json.loads(capsys.readouterr().out)
    assert report == {
        "cutoff": (now - timedelta(days=2.5)).isoformat(),
        "dry_run": True,
        "missed": 0,
        "runs": 1,
        "schedules": 0,
        "steps": 1,
    }
    assert Run.objects.count() == 2


@pytest.mark.django_db
def test_s7_command_batch_size(frozen_clock, capsys):
    for _ in range(5):
        finished_run(frozen_clock.now() - 31 * DAY)
    with CaptureQueriesContext(connection) as captured:
        call_command("leasejobs_prune", "--batch-size", "2", verbosity=0)
    assert capsys.readouterr().out == ""
    assert len(deletes_on(Run, captured)) == 3
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    "args",
    [
        ["--older-than", "0"],
        ["--older-than", "-1"],
        ["--older-than", "soon"],
        ["--older-than", "nan"],
        ["--older-than", "inf"],
        ["--older-than", "36501"],
        ["--batch-size", "0"],
        ["--batch-size", "1.5"],
    ],
)
def test_s7_command_bad_options_are_refused(args):
    with pytest.raises(CommandError):
        call_command("leasejobs_prune", *args)


@pytest.mark.django_db
def test_s7_command_database_error_is_a_one_line_command_error(monkeypatch):
    def broken(**options):
        raise OperationalError("server closed the connection\nunexpectedly")

    monkeypatch.setattr("django_leasejobs.management.commands.leasejobs_prune.prune", broken)
    with pytest.raises(CommandError, match=r"^the prune could not run: OperationalError") as info:
        call_command("leasejobs_prune")
    assert str(info.value) == (
        "the prune could not run: OperationalError: server closed the connection unexpectedly"
    )


@pytest.mark.django_db
def test_o1_half_hours_past_stats_retention_are_pruned_by_the_minutes_rule(frozen_clock, caplog):
    """A half-hour row goes when the half-hour it starts at is before the cutoff, as a minute
    goes when its minute is: the last half-hour before the cutoff goes, the one at it stays."""
    cutoff = frozen_clock.now() - conf.STATS_RETENTION  # 12:00, thirty days back
    for minute in (cutoff - 31 * MINUTE, cutoff - MINUTE, cutoff, cutoff + 29 * MINUTE):
        flushed_stat(minute)
    with caplog.at_level(logging.INFO, logger="django_leasejobs"):
        assert prune_stats(batch_size=1) == 4  # 11:29 and 11:59; their half-hours 11:00, 11:30
    assert "Pass statistics pruned rows=2 half_hours=2" in caplog.text
    assert sorted(PassStat.objects.values_list("minute", flat=True)) == [
        cutoff,
        cutoff + 29 * MINUTE,
    ]
    assert list(PassStatHalfHour.objects.values_list("half_hour", "count")) == [(cutoff, 2)]
