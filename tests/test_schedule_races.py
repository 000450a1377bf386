"""S2/S3 under real concurrency: drives started at the same instant over an overdue schedule."""

from __future__ import annotations

from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.db import connection

from django_leasejobs import cron, run_due_jobs
from django_leasejobs.clock import DatabaseClock
from django_leasejobs.models import Missed, Run, Schedule
from tests.processes import run_together

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]

JOB = "tests.nightly"  # 0 3 * * * Europe/Paris, catch_up_once


def test_s2_s3_two_drives_at_once_record_one_set_of_missed_rows_and_one_catch_up():
    run_due_jobs(jobs=[JOB])  # creates the schedule row (S1)
    now = DatabaseClock().now()
    zone = ZoneInfo("Europe/Paris")
    overdue_since = cron.next_due("0 3 * * *", zone, now - timedelta(days=4))
    Schedule.objects.filter(job=JOB).update(next_due_at=overdue_since)
    expected = cron.count("0 3 * * *", zone, overdue_since, now)
    assert expected >= 3

    processes = 4 if connection.vendor != "sqlite" else 2
    run_together("tests.processes.drive_once", processes, [JOB])

    missed = Missed.objects.filter(job=JOB)
    assert missed.count() == expected  # one set, whoever won
    assert missed.filter(action="caught_up").count() == 1
    assert set(missed.values_list("cause", flat=True)) == {"worker_down"}
    runs = Run.objects.filter(job=JOB)
    assert runs.count() == 1  # one catch-up run
    assert missed.get(action="caught_up").run_id == runs.get().pk
    assert Schedule.objects.get(job=JOB).next_due_at > now
