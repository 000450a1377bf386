"""Claims made ahead of their turn, for short passes (SPEC §13 with L2, L4, L6, L8).

The worker's monotonic clock is frozen (``worker_clock``), so a no-op pass
takes no time by it and the drive claims as far ahead as it may; a handler
that moves the clock makes the passes look long.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_leasejobs import RunStatus, start
from django_leasejobs.models import Run
from django_leasejobs.pacing import BATCH_MAX, pace
from tests.utils import fresh, statements

pytestmark = pytest.mark.django_db

LEASE = timedelta(seconds=60)


def _learn(spec, drive):
    """One pass of *spec*, so this process knows its passes are short."""
    start(spec, instance="first")
    assert drive(spec).completed == 1
    assert pace.batch(spec) == BATCH_MAX


def test_s13_short_passes_share_one_claim_and_are_each_begun_and_committed_alone(
    define, drive, worker_clock
):
    owners = set()

    def handler(p):
        owners.add(Run.objects.values_list("lease_owner", flat=True).get(pk=p.run.id))
        return p.done()

    spec = define("t.ahead.noop", handler, lease=LEASE)
    _learn(spec, drive)
    owners.clear()
    runs = [start(spec, instance=f"r{n}").run for n in range(BATCH_MAX)]
    with CaptureQueriesContext(connection) as queries:
        report = drive(spec)
    assert report.completed == BATCH_MAX
    assert {fresh(run).status for run in runs} == {RunStatus.DONE}
    assert len(owners) == BATCH_MAX  # a token of its own for every run: fenced alone (L6)
    sent = statements(queries)
    claims = [
        sql
        for sql in sent
        if sql.startswith("UPDATE") and '"lease_holder"' in sql.replace("`", '"')
    ]
    assert len(claims) == 1, claims  # one claim statement for all ten
    # Each begun by its own compare-and-set on its own token (L4), alone or carried in the
    # commit of the pass before it (§13); the carried ones share that commit.
    begins = [re.findall(r'SET ["`]lease_began_at["`] = (?!NULL)', sql) for sql in sent]
    assert sum(map(len, begins)) == BATCH_MAX


def test_s13_claiming_ahead_costs_one_claim_then_a_statement_a_pass_on_postgresql(
    define, drive, worker_clock
):
    spec = define("t.ahead.budget", lambda p: p.done(), lease=LEASE)
    _learn(spec, drive)
    for n in range(BATCH_MAX):
        start(spec, instance=f"b{n}")
    with CaptureQueriesContext(connection) as queries:
        drive(spec)
    read_back = 0 if connection.vendor != "mysql" else 1  # MariaDB cannot return the rows
    # the drive's own reads, one claim of all ten, the first BEGIN, then each finish
    # carrying the next run's BEGIN: one statement on PostgreSQL, elsewhere a
    # transaction of the two (one commit either way)
    per_pass = 1 if connection.vendor == "postgresql" else 2
    expected = 5 + 1 + read_back + 1 + per_pass * (BATCH_MAX - 1) + 1
    assert len(statements(queries)) == expected, statements(queries)


def test_l2_runs_claimed_ahead_and_not_reached_are_given_back_uncharged(
    define, drive, worker_clock
):
    spec = define("t.ahead.stop", lambda p: p.done(), lease=LEASE)
    _learn(spec, drive)
    runs = [start(spec, instance=f"s{n}").run for n in range(BATCH_MAX)]
    passes = []
    report = drive(spec, stop=lambda: bool(passes.append(1) or len(passes) > 2))
    assert report.completed == 2  # stopped after two passes, with eight claimed ahead
    left = [fresh(run) for run in runs if fresh(run).status == RunStatus.RUNNING]
    assert len(left) == BATCH_MAX - 2
    for run in left:
        assert run.lease_owner is None  # given back ...
        assert run.lease_began_at is None
        assert run.attempts == 0  # ... uncharged (L2: a claim never begun costs nothing)
        assert run.admission_misses is None
    assert drive(spec).completed == BATCH_MAX - 2  # due again at once


def test_l4_a_claim_ahead_whose_turn_comes_too_late_is_given_back_not_missed(
    define, drive, worker_clock
):
    def handler(p):
        if p.run.instance == "slow":
            worker_clock.now += 50  # past the 15 s margin of a 60 s lease for those behind
        return p.done()

    spec = define("t.ahead.late", handler, lease=LEASE)
    _learn(spec, drive)
    runs = [start(spec, instance="slow").run]
    runs += [start(spec, instance=f"late{n}").run for n in range(3)]
    report = drive(spec)
    assert report.completed == 4
    assert report.warnings == []  # no admission miss was counted (L5): they were given back
    for run in runs:
        stored = fresh(run)
        assert stored.status == RunStatus.DONE
        assert stored.admission_misses is None
    assert pace.batch(spec) < BATCH_MAX  # a 50 s pass: claim fewer ahead from now on


def test_l3_a_takeover_is_never_claimed_ahead(define, drive, worker_clock, frozen_clock):
    spec = define("t.ahead.takeover", lambda p: p.done(), lease=LEASE)
    _learn(spec, drive)
    crashed = start(spec, instance="crashed").run
    Run.objects.filter(pk=crashed.pk).update(
        lease_owner="gone", lease_began_at=frozen_clock.now(), next_attempt_at=frozen_clock.now()
    )
    fine = [start(spec, instance=f"f{n}").run for n in range(3)]
    report = drive(spec)
    assert report.completed == 4
    assert fresh(crashed).attempts == 0  # the takeover charged it, the commit reset it
    assert {fresh(run).status for run in fine} == {RunStatus.DONE}
