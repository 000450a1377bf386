"""A schedule row can stop nothing but itself (D6), and what S1 revision 2 changed."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_leasejobs import InvalidJob, job, pause, registry, resume, start
from django_leasejobs.models import Missed, Run, Schedule
from django_leasejobs.schedules import MISSED_MAX, fire_due_schedules, state
from django_leasejobs.states import ScheduleState as State
from django_leasejobs.worker import Worker
from tests.utils import at

pytestmark = pytest.mark.django_db

HOURLY = "0 * * * *"


@pytest.fixture
def scheduled(define, frozen_clock, drive):
    """Two hourly jobs, their rows made at 12:00, and a plain job with a run due."""
    calls = []

    def make(rule="catch_up_once"):
        for name in ("t.sched.a", "t.sched.b"):
            define(
                name,
                lambda p, name=name: calls.append((name, p.payload["covers"])) or p.done(),
                schedule=HOURLY,
                timezone="UTC",
                missed=rule,
            )
        define("t.sched.plain", lambda p: calls.append(("plain", None)) or p.done())
        frozen_clock.set(at(12))
        drive("t.sched.a", "t.sched.b", "t.sched.plain")
        return calls

    return make


def drive_all(drive):
    return drive("t.sched.a", "t.sched.b", "t.sched.plain")


# -- D6: off the grid -----------------------------------------------------------------------


@pytest.mark.parametrize("rule", ["skip", "catch_up_once", "required"])
def test_d6_a_next_due_at_off_the_grid_fires_once_then_the_grid_resumes(
    scheduled, drive, frozen_clock, rule
):
    calls = scheduled(rule)
    Schedule.objects.filter(job="t.sched.a").update(next_due_at=at(13, 7))  # nudged by hand
    start("t.sched.plain")
    frozen_clock.set(at(13, 9))  # within the grace: it simply fires
    report = drive_all(drive)
    assert report.errors == []
    assert ("t.sched.a", ["2026-03-01T13:07:00Z"]) in calls
    assert ("plain", None) in calls  # runs are still driven
    assert Schedule.objects.get(job="t.sched.a").next_due_at == at(14)


@pytest.mark.parametrize(
    ("rule", "recorded", "runs"),
    [("skip", 3, 0), ("catch_up_once", 3, 1), ("required", 3, 1)],
)
def test_d6_an_off_grid_due_time_missed_in_an_outage_goes_through_the_rule(
    scheduled, drive, frozen_clock, rule, recorded, runs
):
    scheduled(rule)
    Schedule.objects.filter(job="t.sched.a").update(next_due_at=at(13, 7))
    frozen_clock.set(at(15, 30))  # 13:07, 14:00, 15:00 were missed
    report = drive_all(drive)
    assert report.errors == []
    due = list(Missed.objects.filter(job="t.sched.a").values_list("due_at", flat=True))
    assert sorted(due) == [at(13, 7), at(14), at(15)][-recorded:]
    assert Run.objects.filter(job="t.sched.a").count() == runs
    assert Schedule.objects.get(job="t.sched.a").next_due_at == at(16)


# -- D6: any error is that schedule's own -------------------------------------------------


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param({"timezone": "Mars/Olympus"}, id="unknown-zone"),
        pytest.param({"expression": "0 0 30 2 *"}, id="never-comes-round"),
        pytest.param({"expression": "not a cron"}, id="unparsable"),
    ],
)
def test_d6_a_schedule_row_that_cannot_be_planned_is_reported_and_contained(
    scheduled, drive, frozen_clock, broken
):
    calls = scheduled()
    # Another deployment (newer tzdata, another expression) wrote the row.
    Schedule.objects.filter(job="t.sched.a").update(next_due_at=at(13), **broken)
    registry.unregister("t.sched.a")
    job("t.sched.a", schedule=HOURLY, timezone="UTC")(lambda p: p.done())
    # This process still registers it, with its own definition: sync rewrites
    # the row, so break it after the sync, the way the race with another
    # deployment would.
    from django_leasejobs import schedules

    rows = [Schedule.objects.get(job="t.sched.a"), Schedule.objects.get(job="t.sched.b")]
    for row in rows:
        row.next_due_at = at(13)
    for key, value in broken.items():
        setattr(rows[0], key, value)
    problems: list = []
    fire_due_schedules(at(13, 1), rows, None, problems)
    assert [problem.job for problem in problems] == ["t.sched.a"]
    assert Run.objects.filter(job="t.sched.b").count() == 1  # its sibling fired
    assert Schedule.objects.get(job="t.sched.a").next_due_at == at(13)  # tried again next drive
    assert state(rows[0], None, at(13, 1)) in (State.INVALID, State.NEVER_RUN)
    assert schedules.problem(rows[0])
    del calls


def test_d6_an_error_while_firing_is_reported_siblings_fire_and_runs_are_driven(
    scheduled, drive, frozen_clock, monkeypatch
):
    from django_leasejobs.schedules import firing

    calls = scheduled()
    start("t.sched.plain")
    original = firing.start_as

    def failing(origin, job_, *args, **kwargs):
        if getattr(job_, "name", job_) == "t.sched.a":
            raise RuntimeError("the job's start blew up")
        return original(origin, job_, *args, **kwargs)

    monkeypatch.setattr(firing, "start_as", failing)
    frozen_clock.set(at(13, 1))
    report = drive_all(drive)
    assert [note.text for note in report.errors] == [
        "schedule 't.sched.a': RuntimeError: the job's start blew up"
    ]
    assert ("t.sched.b", ["2026-03-01T13:00:00Z"]) in calls
    assert ("plain", None) in calls
    # The failed firing rolled back: the due time is still owed.
    assert Schedule.objects.get(job="t.sched.a").next_due_at == at(13)
    monkeypatch.setattr(firing, "start_as", original)
    assert drive_all(drive).errors == []
    assert ("t.sched.a", ["2026-03-01T13:00:00Z"]) in calls


def test_d6_a_loop_worker_survives_a_drive_that_raises(monkeypatch):
    from django_leasejobs import worker

    reports = []
    calls = iter([RuntimeError("a bug, not an outage"), None])

    def flaky(**options):
        error = next(calls)
        if error:
            raise error
        from django_leasejobs.driver import DriveReport

        return DriveReport()

    monkeypatch.setattr(worker, "run_due_jobs", flaky)
    loop = Worker(interval=0.01, on_report=reports.append)
    assert loop.drive_once() is None  # logged, not raised: the loop goes on
    assert loop.drive_once() is not None
    assert len(reports) == 1


# -- S1: expressions that never come round, and deployments that disagree -----------------


def test_s1_an_expression_that_never_comes_round_is_refused_at_registration():
    with pytest.raises(InvalidJob, match=r"'t\.never'.*never comes round"):
        job("t.never", schedule="0 0 30 2 *")(lambda p: p.done())
    assert "t.never" not in registry


def test_s1_a_changed_expression_continues_from_the_last_due_time_fired(
    define, drive, frozen_clock
):
    spec = define("t.changed", lambda p: p.done(), schedule=HOURLY, timezone="UTC")
    frozen_clock.set(at(12))
    drive(spec)
    frozen_clock.set(at(13, 1))
    drive(spec)  # fires 13:00
    assert Schedule.objects.get(job=spec.name).last_due_at == at(13)
    registry.unregister(spec.name)
    define(spec.name, spec.handler, schedule="*/15 * * * *", timezone="UTC")
    frozen_clock.set(at(13, 20))
    drive(spec)  # the other deployment's expression: 13:15 is owed, not lost
    assert Run.objects.filter(job=spec.name).count() == 2
    assert Schedule.objects.get(job=spec.name).next_due_at == at(13, 30)


def test_s1_two_deployments_that_disagree_lose_no_due_time_of_either(define, drive, frozen_clock):
    """The issue's rolling deploy, with the two deployments' drives interleaved in one process."""
    fired = []
    a = ("t.rolling", "*/2 * * * *")
    b = ("t.rolling", "*/3 * * * *")

    def deployment(expression):
        registry.unregister("t.rolling")
        return define(
            "t.rolling",
            lambda p: fired.append(p.payload["due"]) or p.done(),
            schedule=expression,
            timezone="UTC",
        )

    frozen_clock.set(at(12))
    deployment(a[1])
    drive("t.rolling")
    for second in range(10, 13 * 60, 20):  # 13 minutes of drives, every 20 s, alternating
        frozen_clock.set(at(12) + timedelta(seconds=second))
        deployment(a[1] if (second // 20) % 2 else b[1])
        drive("t.rolling")
    # Before revision 2 every drive rescheduled "from now": nothing ever fired.
    assert len(fired) >= 6
    assert not Missed.objects.filter(job="t.rolling").exists()


def test_s1_orphaned_after_orphan_after_and_disabled_by_retention(hourly_row, frozen_clock):
    from django_leasejobs.retention import prune

    row = hourly_row
    registry.unregister(row.job)
    frozen_clock.set(at(12) + timedelta(days=7, minutes=1))
    schedule = Schedule.objects.get(pk=row.pk)
    assert state(schedule, None, frozen_clock.now()) == State.ORPHANED
    report = prune()
    assert Schedule.objects.get(pk=row.pk).enabled is False
    assert report.schedules == Schedule.objects.filter(enabled=False).count() >= 1


def test_s1_a_drive_that_registers_the_job_keeps_it_from_being_orphaned(
    hourly_row, drive, frozen_clock
):
    for day in range(1, 10):
        frozen_clock.set(at(12) + timedelta(days=day))
        drive(hourly_row.job)
    schedule = Schedule.objects.get(pk=hourly_row.pk)
    assert state(schedule, None, frozen_clock.now()) != State.ORPHANED


@pytest.fixture
def hourly_row(define, drive, frozen_clock):
    define("t.orphan", lambda p: p.done(), schedule=HOURLY, timezone="UTC", missed="skip")
    frozen_clock.set(at(12))
    drive("t.orphan")
    return Schedule.objects.get(job="t.orphan")


# -- S4: a pause is never overtaken -----------------------------------------------------------


def test_s4_a_drive_that_read_the_rows_before_a_pause_does_not_fire(hourly_row, frozen_clock):
    frozen_clock.set(at(13, 1))
    rows = list(Schedule.objects.filter(job="t.orphan"))  # the drive's read ...
    assert pause("t.orphan", "alice").done  # ... then the pause ...
    assert fire_due_schedules(frozen_clock.now(), rows) == []  # ... then its firing
    assert not Run.objects.filter(job="t.orphan").exists()
    assert Schedule.objects.get(job="t.orphan").next_due_at == at(13)


# -- S3: a long pause of a required schedule is "paused" to its last batch -------------------


def test_s3_every_batch_of_a_required_resume_is_recorded_as_paused(define, drive, frozen_clock):
    spec = define(
        "t.required.pause",
        lambda p: p.done(),
        schedule="* * * * *",
        timezone="UTC",
        missed="required",
    )
    frozen_clock.set(at(0))
    drive(spec)
    pause(spec.name, "alice")
    frozen_clock.set(at(0) + timedelta(minutes=2500, seconds=30))
    resume(spec.name, "bob")
    for _ in range(4):
        drive(spec)
    causes = set(Missed.objects.filter(job=spec.name).values_list("cause", flat=True))
    assert Missed.objects.filter(job=spec.name).count() == 2500 > MISSED_MAX
    assert causes == {"paused"}
