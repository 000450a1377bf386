"""S6: what a schedule reads as, job_overdue once per episode, and DST through the drive."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from django_leasejobs import Retry, RunStatus, pause, start
from django_leasejobs.models import Run, Schedule
from django_leasejobs.schedules import live_runs, state
from django_leasejobs.signals import job_overdue
from django_leasejobs.states import ScheduleState as State
from tests.utils import at

pytestmark = pytest.mark.django_db


@pytest.fixture
def hourly(define, drive, frozen_clock):
    outcomes = {"fail": False}

    def handler(p):
        if outcomes["fail"]:
            raise RuntimeError("upstream down")
        return p.done()

    spec = define(
        "t.states",
        handler,
        schedule="0 * * * *",
        timezone="UTC",
        retry=Retry(max_attempts=1),
        stall_after=timedelta(minutes=20),
    )
    frozen_clock.set(at(12))
    drive(spec)
    return spec, outcomes


def read(spec, now):
    row = Schedule.objects.get(job=spec.name)
    return state(row, live_runs([spec.name]).get(spec.name), now)


def test_s6_never_run_then_ok(hourly, drive, frozen_clock):
    spec, _ = hourly
    assert read(spec, frozen_clock.now()) == State.NEVER_RUN
    frozen_clock.set(at(13, 1))
    drive(spec)
    assert read(spec, frozen_clock.now()) == State.OK
    row = Schedule.objects.get(job=spec.name)
    assert row.last_outcome == "done"
    assert row.last_success_at == at(13, 1)


def test_s6_failed(hourly, drive, frozen_clock):
    spec, outcomes = hourly
    outcomes["fail"] = True
    frozen_clock.set(at(13, 1))
    drive(spec)
    assert read(spec, frozen_clock.now()) == State.FAILED


def test_s6_running_retrying_and_stalled(hourly, frozen_clock):
    spec, _ = hourly
    run = start(spec).run
    assert read(spec, frozen_clock.now()) == State.RUNNING
    Run.objects.filter(pk=run.pk).update(attempts=2)
    assert read(spec, frozen_clock.now()) == State.RETRYING
    frozen_clock.advance(timedelta(minutes=21))  # past the job's stall_after
    assert read(spec, frozen_clock.now()) == State.STALLED


def test_s6_paused(hourly, frozen_clock):
    spec, _ = hourly
    pause(spec.name, "alice")
    assert read(spec, frozen_clock.now()) == State.PAUSED


def test_s6_missed_when_no_success_within_twice_the_period(hourly, drive, frozen_clock):
    spec, _ = hourly
    frozen_clock.set(at(13, 1))
    drive(spec)
    assert read(spec, at(15, 0)) == State.OK
    assert read(spec, at(15, 2)) == State.MISSED


def test_s6_job_overdue_is_sent_once_per_episode(
    hourly, drive, frozen_clock, django_capture_on_commit_callbacks
):
    spec, _ = hourly
    sent = []

    def receiver(sender, schedule, state, **kwargs):
        sent.append((schedule.job, state))

    job_overdue.connect(receiver)
    try:
        run = start(spec).run  # a run that hangs on
        frozen_clock.advance(timedelta(minutes=21))
        with django_capture_on_commit_callbacks(execute=True):
            drive("tests.noop")  # drives do the overdue check for every schedule
            drive("tests.noop")
        assert sent == [(spec.name, State.STALLED)]
        Run.objects.filter(pk=run.pk).update(status=RunStatus.DONE, live_key=None)
        Schedule.objects.filter(job=spec.name).update(
            last_outcome="done", last_success_at=frozen_clock.now()
        )
        with django_capture_on_commit_callbacks(execute=True):
            drive("tests.noop")  # recovered: the episode ends
            start(spec)
            frozen_clock.advance(timedelta(minutes=21))
            drive("tests.noop")  # a new episode
        assert sent == [(spec.name, State.STALLED), (spec.name, State.STALLED)]
    finally:
        job_overdue.disconnect(receiver)


@pytest.mark.parametrize(
    ("name", "start_at", "expected"),
    [
        (
            "t.paris.march",
            datetime(2026, 3, 27, 12, tzinfo=UTC),
            [
                "2026-03-28T01:00:00Z",
                "2026-03-29T01:00:00Z",  # 03:00 CEST: 02:00 did not exist that night
                "2026-03-30T00:00:00Z",
                "2026-03-31T00:00:00Z",
            ],
        ),
        (
            "t.paris.october",
            datetime(2026, 10, 23, 12, tzinfo=UTC),
            [
                "2026-10-24T00:00:00Z",
                "2026-10-25T00:00:00Z",  # the first 02:00; the repeated 02:00 is not fired
                "2026-10-26T01:00:00Z",
                "2026-10-27T01:00:00Z",
            ],
        ),
    ],
)
def test_dst_a_0200_paris_job_fires_once_on_each_change_day(
    define, drive, frozen_clock, name, start_at, expected
):
    dues = []
    spec = define(
        name,
        lambda p: dues.append(p.payload["due"]) or p.done(),
        schedule="0 2 * * *",
        timezone="Europe/Paris",
    )
    frozen_clock.set(start_at)
    drive(spec)
    for _ in range(4 * 24 * 4):  # four days, a drive every 15 minutes, like cron
        frozen_clock.advance(timedelta(minutes=15))
        drive(spec)
    assert dues == expected
