"""Schedules, S1-S5: rows follow the code, due times fire once, missed-run rules, pause."""

from __future__ import annotations

import json
from datetime import timedelta
from types import SimpleNamespace

import pytest

from django_leasejobs import RunNowRefused, RunStatus, pause, resume, run_now
from django_leasejobs.models import Missed, Run, Schedule
from django_leasejobs.schedules import MISSED_MAX
from django_leasejobs.signals import schedule_missed
from tests.utils import at

pytestmark = pytest.mark.django_db

HOURLY = "0 * * * *"


@pytest.fixture
def hourly(define, frozen_clock):
    """Define an hourly UTC job with a rule, and drive once at 12:00 to create its row."""

    def make(rule="catch_up_once", name="t.hourly", **options):
        calls = []
        spec = define(
            name,
            lambda p: calls.append(p.payload) or p.done(),
            schedule=HOURLY,
            timezone="UTC",
            missed=rule,
            **options,
        )
        frozen_clock.set(at(12, 0))
        from django_leasejobs import run_due_jobs

        run_due_jobs(jobs=[name])
        return SimpleNamespace(name=spec.name, handler=spec.handler, calls=calls)

    return make


def row(spec):
    return Schedule.objects.get(job=spec.name)


def runs(spec):
    return Run.objects.filter(job=spec.name).order_by("id")


# -- S1 ---------------------------------------------------------------------------


def test_s1_a_drive_creates_the_row_due_next_after_now(hourly):
    spec = hourly()
    schedule = row(spec)
    assert (schedule.expression, schedule.timezone, schedule.rule) == (
        HOURLY,
        "UTC",
        "catch_up_once",
    )
    assert schedule.next_due_at == at(13)
    assert schedule.enabled
    assert not runs(spec).exists()  # nothing is owed for a schedule that did not exist


def test_s1_default_time_zone_is_settings_time_zone(define, drive, settings):
    settings.TIME_ZONE = "Europe/Paris"
    define("t.tz", lambda p: p.done(), schedule="0 3 * * *")
    drive("t.tz")
    assert Schedule.objects.get(job="t.tz").timezone == "Europe/Paris"


def test_s1_a_changed_expression_reschedules_from_now(hourly, define, drive, frozen_clock):
    spec = hourly()
    frozen_clock.set(at(12, 20))
    define(spec.name, spec.handler, schedule="*/15 * * * *", timezone="UTC")
    drive(spec)
    schedule = row(spec)
    assert schedule.expression == "*/15 * * * *"
    assert schedule.next_due_at == at(12, 30)


def test_s1_a_drive_that_does_not_register_the_job_never_disables_its_row(hourly, drive):
    from django_leasejobs import registry

    spec = hourly()
    registry.unregister(spec.name)  # another deployment's drive, or an old worker (S1, rev. 2)
    drive()
    schedule = Schedule.objects.get(job=spec.name)
    assert schedule.enabled is True
    assert schedule.next_due_at == at(13)


def test_s1_a_job_registered_without_its_schedule_is_disabled_not_deleted(hourly, define, drive):
    from django_leasejobs import registry

    spec = hourly()
    registry.unregister(spec.name)
    define(spec.name, spec.handler)  # the same job, its schedule removed from the code
    drive(spec.name)
    assert Schedule.objects.get(job=spec.name).enabled is False


# -- S2 ---------------------------------------------------------------------------


def test_s2_a_due_time_fires_one_run_covering_it(hourly, drive, frozen_clock):
    spec = hourly()
    frozen_clock.set(at(13, 1))
    report = drive(spec)
    assert report.completed == 1
    assert spec.calls == [{"due": "2026-03-01T13:00:00Z", "covers": ["2026-03-01T13:00:00Z"]}]
    assert row(spec).next_due_at == at(14)
    assert row(spec).last_run_id == runs(spec).get().pk
    drive(spec)  # same moment, second drive: nothing fires twice
    assert runs(spec).count() == 1
    assert not Missed.objects.exists()


def test_s2_a_run_still_live_at_the_next_due_time_is_joined_with_again(define, drive, frozen_clock):
    from django_leasejobs import Defer

    spec = define(
        "t.slow",
        lambda p: (_ for _ in ()).throw(Defer(timedelta(hours=5))),
        schedule=HOURLY,
        timezone="UTC",
    )
    frozen_clock.set(at(12))
    drive(spec)
    for hour in (13, 14, 15):
        frozen_clock.set(at(hour, 1))
        drive(spec)
    live = Run.objects.get(job=spec.name)  # one run, deferred, never finished
    assert live.status == RunStatus.RUNNING
    assert live.rerun_requested is True
    assert json.loads(live.rerun_payload)["due"] == "2026-03-01T15:00:00Z"


# -- S3 ---------------------------------------------------------------------------


def outage(frozen_clock, hours):
    """The workers were down: the next drive comes *hours* hours late (past the grace)."""
    frozen_clock.set(at(12) + timedelta(hours=hours, minutes=30))


def missed_rows(spec):
    return list(
        Missed.objects.filter(job=spec.name)
        .order_by("due_at")
        .values_list("due_at", "cause", "action", "run_id")
    )


@pytest.mark.parametrize(
    ("rule", "actions", "covered"),
    [
        # skip: record every missed due time, run nothing
        ("skip", ["skipped"] * 5, None),
        # catch_up_once: record them, run once for the newest
        ("catch_up_once", ["skipped"] * 4 + ["caught_up"], [17]),
        # required: every missed due time runs, oldest first
        ("required", ["caught_up"] * 5, [13, 14, 15, 16, 17]),
    ],
)
def test_s3_an_outage_goes_through_the_rule(hourly, drive, frozen_clock, rule, actions, covered):
    spec = hourly(rule)
    outage(frozen_clock, 5)
    drive(spec)
    run = runs(spec).first()
    assert missed_rows(spec) == [
        (at(hour), "worker_down", action, run.pk if action == "caught_up" else None)
        for hour, action in zip(range(13, 18), actions, strict=True)
    ]
    if covered is None:
        assert not runs(spec).exists()
    else:
        assert runs(spec).count() == 1
        (payload,) = spec.calls
        assert payload["covers"] == [f"2026-03-01T{hour}:00:00Z" for hour in covered]
        assert payload["due"] == "2026-03-01T17:00:00Z"
    assert row(spec).next_due_at == at(18)


def test_s3_a_second_restore_records_nothing_twice(hourly, drive, frozen_clock):
    spec = hourly("catch_up_once")
    outage(frozen_clock, 5)
    drive(spec)
    drive(spec)
    frozen_clock.advance(timedelta(minutes=10))
    drive(spec)
    assert len(missed_rows(spec)) == 5
    assert runs(spec).count() == 1


def test_s3_a_due_time_within_the_grace_just_fires(hourly, drive, frozen_clock, settings):
    settings.LEASEJOBS = {
        "CLOCK": "django_leasejobs.clock.FrozenClock",
        "MISSED_GRACE": timedelta(minutes=5),
    }
    spec = hourly("skip")
    frozen_clock.set(at(13, 4))
    drive(spec)
    assert runs(spec).count() == 1
    assert not Missed.objects.exists()


def test_s3_required_works_in_batches_of_at_most_1000(define, drive, frozen_clock):
    calls = []
    spec = define(
        "t.minutely",
        lambda p: calls.append(len(p.payload["covers"])) or p.done(),
        schedule="* * * * *",
        timezone="UTC",
        missed="required",
    )
    frozen_clock.set(at(0))
    drive(spec)
    frozen_clock.set(at(0) + timedelta(minutes=2500, seconds=30))
    for _ in range(4):
        drive(spec)
    assert calls == [1000, 1000, 500]
    assert Missed.objects.filter(job=spec.name).count() == 2500
    assert Missed.objects.filter(job=spec.name, action="caught_up").count() == 2500


def test_s3_a_year_long_outage_of_a_minutely_job_writes_at_most_1000_rows(
    define, drive, frozen_clock
):
    seen = []

    def receiver(sender, schedule, due_times, dropped, **kwargs):
        seen.append((len(due_times), dropped))

    spec = define("t.year", lambda p: p.done(), schedule="* * * * *", timezone="UTC", missed="skip")
    frozen_clock.set(at(0))
    drive(spec)
    frozen_clock.set(at(0) + timedelta(days=365, seconds=30))
    schedule_missed.connect(receiver)
    try:
        from django.test.utils import CaptureQueriesContext  # noqa: F401

        drive(spec)
    finally:
        schedule_missed.disconnect(receiver)
    assert Missed.objects.filter(job=spec.name).count() == MISSED_MAX
    assert row(spec).next_due_at == at(0) + timedelta(days=365, minutes=1)


# -- S4 ---------------------------------------------------------------------------


def test_s4_pause_is_a_compare_and_set_with_actor_and_note(hourly):
    spec = hourly()
    first = pause(spec.name, "alice", note="vendor maintenance")
    second = pause(spec.name, "bob")
    assert first.done is True
    assert second.done is False  # "already paused"
    schedule = row(spec)
    assert (schedule.paused_by, schedule.pause_note) == ("alice", "vendor maintenance")
    assert schedule.paused_at is not None


def test_s4_a_note_longer_than_200_is_refused(hourly):
    spec = hourly()
    with pytest.raises(ValueError, match="200"):
        pause(spec.name, "alice", note="x" * 201)
    assert row(spec).paused_at is None


def test_s4_a_paused_schedule_does_not_fire(hourly, drive, frozen_clock):
    spec = hourly()
    pause(spec.name, "alice")
    frozen_clock.set(at(13, 1))
    drive(spec)
    assert not runs(spec).exists()


@pytest.mark.parametrize(
    ("rule", "expected_runs", "actions"),
    [
        ("skip", 0, ["skipped"] * 3),
        ("catch_up_once", 1, ["skipped", "skipped", "caught_up"]),
        ("required", 1, ["caught_up"] * 3),
    ],
)
def test_s4_resume_applies_the_rule_with_cause_paused(
    hourly, drive, frozen_clock, rule, expected_runs, actions
):
    spec = hourly(rule)
    pause(spec.name, "alice")
    frozen_clock.set(at(15, 30))
    drive(spec)  # paused: records nothing, fires nothing
    assert not Missed.objects.exists()
    result = resume(spec.name, "bob")
    assert result.done
    assert result.missed == 3
    assert [r[1] for r in missed_rows(spec)] == ["paused"] * 3
    assert [r[2] for r in missed_rows(spec)] == actions
    assert runs(spec).count() == expected_runs
    assert row(spec).next_due_at == at(16)
    assert resume(spec.name, "bob").done is False  # "already"


# -- S5 ---------------------------------------------------------------------------


def test_s5_run_now_starts_a_run_by_hand(hourly):
    spec = hourly()
    result = run_now(spec.name, "alice")
    assert result.run.status == RunStatus.RUNNING
    assert json.loads(result.run.payload)["by_hand"] == "alice"


def test_s5_run_now_refuses_a_job_not_safe_to_repeat():
    with pytest.raises(RunNowRefused) as caught:
        run_now("tests.fragile", "alice")
    assert caught.value.reason == "not_safe"


def test_s5_run_now_refuses_a_job_with_a_live_run(hourly):
    spec = hourly()
    run_now(spec.name, "alice")
    with pytest.raises(RunNowRefused) as caught:
        run_now(spec.name, "alice")
    assert caught.value.reason == "live"


def test_s5_run_now_refuses_past_the_hourly_cap_saying_when_it_frees(
    hourly, drive, frozen_clock, settings
):
    settings.LEASEJOBS = {"CLOCK": "django_leasejobs.clock.FrozenClock", "HAND_RUNS_PER_HOUR": 2}
    spec = hourly()
    for minute in (5, 10):
        frozen_clock.set(at(12, minute))
        run_now(spec.name, "alice")
        drive(spec)  # finish it, so the next is not refused as live
    frozen_clock.set(at(12, 20))
    with pytest.raises(RunNowRefused) as caught:
        run_now(spec.name, "alice")
    assert caught.value.reason == "cap"
    assert caught.value.retry_at == at(13, 5)
    frozen_clock.set(at(13, 6))
    assert run_now(spec.name, "alice").run


def test_s1_a_job_back_in_the_code_keeps_its_due_time_and_its_rule_applies(
    hourly, define, drive, frozen_clock
):
    from django_leasejobs import registry

    spec = hourly("catch_up_once")
    registry.unregister(spec.name)
    frozen_clock.set(at(15, 30))
    drive()  # a process without the job: the row is left alone, nothing fires
    assert row(spec).enabled is True
    assert not runs(spec).exists()
    define(spec.name, spec.handler, schedule=HOURLY, timezone="UTC", missed="catch_up_once")
    drive(spec.name)  # back: 13:00-15:00 go through the rule
    assert row(spec).enabled is True
    assert [r[2] for r in missed_rows(spec)] == ["skipped", "skipped", "caught_up"]
    assert runs(spec).count() == 1


def test_s5_the_hand_run_cap_counts_hand_runs_not_payload_text(hourly, drive, settings):
    settings.LEASEJOBS = {"CLOCK": "django_leasejobs.clock.FrozenClock", "HAND_RUNS_PER_HOUR": 1}
    spec = hourly()
    for n in range(3):  # a user's own payloads that happen to say "by_hand"
        from django_leasejobs import start

        start(spec.name, {"by_hand": "a form field"}, instance=f"i{n}")
        drive(spec)
    result = run_now(spec.name, "alice")
    assert result.run.origin == "hand"
    drive(spec)
    with pytest.raises(RunNowRefused) as caught:
        run_now(spec.name, "alice")
    assert caught.value.reason == "cap"
