"""Issue 21: schedule rows have one writer, and their vocabularies and ids one definition."""

from __future__ import annotations

import re
import traceback
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection

from django_leasejobs import job, pause, registry, resume
from django_leasejobs.ids import ID_LENGTH, ID_PATTERN, new_id, new_owner
from django_leasejobs.models import Missed, Run, Schedule, Slot, TaskAttempt
from django_leasejobs.retention import prune
from django_leasejobs.states import MissedRule, RunStatus
from tests.utils import at

WRITER = ("schedules", "writes.py")
#: Retention deletes old ledger rows by key as it deletes old runs (S7): history, not state.
DELETES = ("retention.py",)
TABLES = (Schedule._meta.db_table, Missed._meta.db_table)


class Writes:
    """Every statement that writes a schedule or missed row, with the package frame that sent it."""

    def __init__(self):
        self.seen = []

    def __call__(self, execute, sql, params, many, context):
        verb = sql.lstrip().split(None, 1)[0].upper()
        if verb in {"INSERT", "UPDATE", "DELETE"} and any(table in sql for table in TABLES):
            frames = [
                _in_package(Path(frame.filename))
                for frame in traceback.extract_stack()
                if "django_leasejobs" in Path(frame.filename).parts
            ]
            self.seen.append((verb, frames[-1] if frames else None))
        return execute(sql, params, many, context)


def _in_package(path):
    """*path* from inside the package: ``("schedules", "writes.py")``."""
    parts = path.parts
    return parts[len(parts) - parts[::-1].index("django_leasejobs") :]


@pytest.mark.django_db
def test_s1_s7_every_schedule_and_missed_write_is_sent_by_schedules_writes(
    define, drive, frozen_clock
):
    """Sync, firing, a missed window, the overdue episode, outcomes, pause, resume, prune."""
    spec = define(
        "t.writer",
        lambda p: p.done(),
        schedule="0 * * * *",
        timezone="UTC",
        missed=MissedRule.CATCH_UP_ONCE,
        stall_after=timedelta(minutes=20),
    )
    gone = define("t.writer.gone", lambda p: p.done(), schedule="0 * * * *", timezone="UTC")
    writes = Writes()
    with connection.execute_wrapper(writes):
        frozen_clock.set(at(12))
        drive(spec, gone)  # create both rows (S1)
        frozen_clock.set(at(13, 1))
        drive(spec)  # fire 13:00, note the run and its outcome (S2, S6)
        frozen_clock.set(at(17, 30))
        drive(spec)  # an outage: the missed ledger and one catch-up (S3)
        spec.start(instance="hangs")
        frozen_clock.advance(timedelta(minutes=21))
        drive("tests.noop")  # a stalled live run opens an overdue episode (S6)
        pause(spec.name, "alice", note="maintenance")  # S4
        frozen_clock.set(at(20, 30))
        resume(spec.name, "bob")  # S3 with cause paused
        paused_missed = Missed.objects.filter(job=spec.name, cause="paused").count()
        registry.unregister(gone.name)
        frozen_clock.set(at(12) + timedelta(days=34))
        drive(spec)  # keeps spec's row from being orphaned
        # The orphaned row is disabled; old runs are unlinked and deleted, and
        # the old missed due times go (S1, S7).
        report = prune()
    assert paused_missed
    assert report.runs
    assert report.missed
    assert report.schedules == 1
    assert not Schedule.objects.get(job=gone.name).enabled
    assert {verb for verb, _ in writes.seen} == {"INSERT", "UPDATE", "DELETE"}
    assert set(writes.seen) <= {
        ("INSERT", WRITER),
        ("UPDATE", WRITER),
        ("DELETE", DELETES),
    }, set(writes.seen)


def test_s3_a_jobs_missed_rule_is_a_member_whether_given_as_one_or_by_value():
    try:
        by_value = job("scratch.rule.value", schedule="0 3 * * *", missed="skip")(lambda p: None)
        member = job("scratch.rule.member", schedule="0 3 * * *", missed=MissedRule.REQUIRED)(
            lambda p: None
        )
        default = job("scratch.rule.default", schedule="0 3 * * *")(lambda p: None)
    finally:
        for name in ("scratch.rule.value", "scratch.rule.member", "scratch.rule.default"):
            registry.unregister(name)
    assert by_value.missed is MissedRule.SKIP
    assert member.missed is MissedRule.REQUIRED
    assert default.missed is MissedRule.CATCH_UP_ONCE


def test_s6_a_schedules_last_outcome_is_a_run_status():
    field = Schedule._meta.get_field("last_outcome")
    assert field.choices == RunStatus.choices
    assert field.max_length >= max(len(value) for value in RunStatus.values)


def test_ids_and_owner_tokens_match_the_one_pattern_and_fit_the_id_columns():
    pattern = re.compile(ID_PATTERN)
    assert all(pattern.fullmatch(value) for value in [new_id(), new_owner()])
    assert not any(pattern.fullmatch(char * ID_LENGTH) for char in "ILOUa")  # not Crockford's
    columns = [
        Run._meta.get_field("id"),
        Run._meta.get_field("lease_owner"),
        TaskAttempt._meta.get_field("owner"),
        Slot._meta.get_field("run_id"),
        Slot._meta.get_field("owner"),
    ]
    assert {column.max_length for column in columns} == {ID_LENGTH} == {len(new_id())}
