"""An advance that claims and begins its run's next pass (§13, L2, L4, L6, W6, D3).

A drive of several passes of one run (``max_passes``) needs no claim and no
BEGIN of its own between them where the backend's UPDATE returns rows
(PostgreSQL, SQLite): the advance writes the next pass's lease
(django_leasejobs/going_on.py). MariaDB goes the long way, as a limited job
does everywhere; both are pinned here.
"""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_leasejobs import Limit, RunStatus, pause_queue, start, store
from django_leasejobs.models import Run, Step
from tests.test_driver import DRIVE, drop_ledger, one_pass, one_step
from tests.utils import fresh, statements

pytestmark = pytest.mark.django_db


def goes_on() -> bool:
    return store.goes_on("default")


def advancing(handler=None):
    """A handler that counts its passes in the cursor, calling *handler* first."""

    def advance(p):
        if handler is not None:
            handler(p)
        return p.advance((p.cursor or 0) + 1)

    return advance


@pytest.fixture
def warm(drive):
    """One drive first, so the schedule rows of tests/jobs.py exist (S1 creates them once)."""
    drive()


def test_s13_a_drive_of_many_passes_sends_one_statement_between_two_passes(define, drive, warm):
    """§13 + D3: pass after pass of one run, each advance claims and begins the next
    pass in its own UPDATE; the last one, with no pass after it, is a plain commit."""
    spec = define("t.going_on.budget", advancing())
    run = start(spec).run
    with CaptureQueriesContext(connection) as queries:
        report = drive(spec, max_passes=4)
    assert report.advanced == 4
    assert fresh(run).cursor == "4"
    between = 1 if goes_on() else one_pass()  # the advance; else the advance, claim, BEGIN
    assert len(statements(queries)) == DRIVE + one_pass() + 3 * between, statements(queries)


def test_s13_r5_a_pass_with_steps_drops_its_ledger_in_the_statement_that_goes_on(
    define, drive, warm
):
    """R5: the next pass starts with an empty ledger, so it may take the same step names."""
    seen = []

    def handler(p):
        seen.append(p.step("fetch", lambda: p.cursor))

    spec = define("t.going_on.steps", advancing(handler))
    run = start(spec).run
    with CaptureQueriesContext(connection) as queries:
        report = drive(spec, max_passes=3)
    assert report.advanced == 3
    assert seen == [None, 1, 2]  # each pass ran its own step, none replayed the last's
    assert not Step.objects.filter(run_id=run.pk).exists()
    assert fresh(run).has_steps is False
    between = 1 + drop_ledger() if goes_on() else one_pass() + drop_ledger()
    expected = DRIVE + one_pass() + 3 * one_step() + 2 * between + drop_ledger()
    assert len(statements(queries)) == expected, statements(queries)


def test_l2_l4_the_pass_gone_on_to_has_its_own_owner_token_and_a_begun_lease(define, drive):
    """L2 + L4: what the advance wrote is a claim and a BEGIN: a new owner, this process
    as holder, begun, a lease ahead -- read by the next pass from the row itself."""
    from django_leasejobs.holder import current_holder

    leases = []

    def handler(p):
        row = Run.objects.get(pk=p.run.id)
        leases.append((row.lease_owner, row.lease_holder, row.lease_began_at is not None))
        assert row.next_attempt_at > row.lease_began_at  # the lease is ahead of its BEGIN

    spec = define("t.going_on.owners", advancing(handler))
    start(spec)
    drive(spec, max_passes=3)
    assert len({owner for owner, _, _ in leases}) == 3
    assert {(holder, began) for _, holder, began in leases} == {(current_holder(), True)}


def test_w6_a_queue_paused_during_a_pass_is_not_gone_on_with(define, drive):
    """W6: the advance that would go on is refused for the paused queue; the advance
    alone commits, and the pass after it never begins, charged nothing."""
    calls = []

    def handler(p):
        calls.append(p.cursor)
        pause_queue("going-on", by="test")

    spec = define("t.going_on.paused", advancing(handler), queue="going-on")
    run = start(spec).run
    report = drive(spec, max_passes=3)
    assert calls == [None]
    assert report.advanced == 1
    row = fresh(run)
    assert (row.status, row.cursor, row.lease_owner, row.lease_began_at) == (
        RunStatus.RUNNING,
        "1",
        None,
        None,
    )
    assert (row.attempts, row.admission_misses) == (0, None)


def test_l6_an_advance_whose_lease_was_taken_writes_nothing_and_goes_on_with_nothing(define, drive):
    """L6: another worker took the run during the pass: neither the advance nor the
    next pass's lease is written, and no further pass runs here."""
    calls = []

    def handler(p):
        calls.append(p.cursor)
        Run.objects.filter(pk=p.run.id).update(lease_owner="another-worker")

    spec = define("t.going_on.lost", advancing(handler))
    run = start(spec).run
    report = drive(spec, max_passes=3)
    assert calls == [None]
    assert report.superseded == 1
    row = fresh(run)
    assert (row.cursor, row.lease_owner) == (None, "another-worker")


def test_d3_a_drive_told_to_stop_during_a_pass_goes_on_with_nothing(define, drive):
    """W5 + D3: leave to go on is asked at the advance, so a stop heard during the pass
    begins nothing more: the lease is released, the run due for the next drive."""
    stopping = []

    def handler(p):
        stopping.append(True)

    spec = define("t.going_on.stop", advancing(handler))
    run = start(spec).run
    report = drive(spec, max_passes=3, stop=lambda: bool(stopping))
    assert report.advanced == 1
    row = fresh(run)
    assert (row.cursor, row.lease_owner, row.lease_began_at) == ("1", None, None)


def test_c2_a_limited_job_goes_the_long_way_its_begin_taking_a_slot(define, drive, warm):
    """C2: a limited job's BEGIN takes a slot, so its advance claims nothing ahead: each
    pass is claimed, takes its slot (a read and a compare-and-set) and begins, as alone."""
    spec = define("t.going_on.limited", advancing(), limit=Limit(concurrency=1))
    run = start(spec).run
    drive(spec)  # the key's first pass creates its slot rows (once)
    with CaptureQueriesContext(connection) as queries:
        report = drive(spec, max_passes=3)
    assert report.advanced == 3
    assert fresh(run).cursor == "4"
    sent = statements(queries)
    taken = [sql for sql in sent if re.match(r"UPDATE [`\"]leasejobs_slot[`\"]", sql)]
    assert len(taken) == 3, sent
    assert len(sent) == DRIVE + 3 * (one_pass() + 2), sent
