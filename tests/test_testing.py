"""``django_leasejobs.testing``: the helper users drive their own tests with."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_leasejobs import RunStatus, start
from django_leasejobs.models import Run
from django_leasejobs.testing import DrivesExhausted, drive_until_idle

pytestmark = pytest.mark.django_db


def test_drive_until_idle_takes_every_run_through_every_pass_and_follow_up(define):
    def handler(p):
        page = (p.cursor or 0) + 1
        return p.done(result=page) if page == 3 else p.advance(page)

    spec = define("t.testing.pages", handler)
    start(spec, instance="a")
    start(spec, instance="b")
    start(spec, instance="b", again=True)  # a kick: its follow-up is driven too
    report = drive_until_idle(jobs=[spec.name])
    assert (report.completed, report.advanced) == (3, 6)
    assert report.errors == []
    runs = Run.objects.filter(job=spec.name)
    assert runs.count() == 3
    assert {run.status for run in runs} == {RunStatus.DONE}
    assert {run.decoded_result().value for run in runs} == {3}


def test_drive_until_idle_leaves_what_is_not_due_yet_for_the_clock(define, frozen_clock):
    def handler(p):
        raise RuntimeError("down")

    spec = define("t.testing.retry", handler)
    start(spec)
    report = drive_until_idle(jobs=[spec.name])
    assert (report.attempted, report.retrying) == (1, 1)  # the back-off is not over yet
    assert "RuntimeError: down" in report.errors[0].text
    frozen_clock.advance(timedelta(hours=1))
    assert drive_until_idle(jobs=[spec.name]).retrying == 1


def test_drive_until_idle_fails_a_job_that_never_finishes(define):
    spec = define("t.testing.forever", lambda p: p.advance((p.cursor or 0) + 1))
    start(spec)
    with pytest.raises(DrivesExhausted, match="still due after 5 drives") as raised:
        drive_until_idle(jobs=[spec.name], max_drives=5)
    assert raised.value.report.advanced == 5


def test_drive_until_idle_drives_only_the_queues_given(define):
    spec = define("t.testing.queues", lambda p: p.done())
    start(spec, instance="a", queue="a")
    start(spec, instance="b", queue="b")
    assert drive_until_idle(jobs=[spec.name], queues=["a"]).completed == 1
    assert Run.objects.get(instance="b").status == RunStatus.RUNNING
