"""Read replicas (SPEC §12, revision 4): with a router that sends reads to a replica, only the
due read and the admin's lists follow it.

Every claim, BEGIN and fenced write, and every read that judges a lease or feeds a claim --
the holder scan (L9), a pass's step ledger, the admin's run page and its actions, a cancel,
``leasejobs_status``, a task's result -- goes to the write alias: a replica's lag may delay
pick-up, never break a rule.

The replica here is tests/settings.py's ``replica`` alias, a test MIRROR of the default
database, and tests/routers.py sends every read of the app's models to it. Both aliases see
the same rows, so what is proved is where each statement was sent: a lease read that
followed the router would show up on the replica's connection and fail the test. The tests
commit (``transaction=True``): the replica is a connection of its own, which sees only what
was committed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connections
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from django_leasejobs import RunStatus, driver, operators, start, stats, store
from django_leasejobs.clock import get_clock
from django_leasejobs.holder import current_holder
from django_leasejobs.leases import ENTRY_MARGIN
from django_leasejobs.models import Run
from django_leasejobs.states import FailureCode
from tests import tasks
from tests.factories import RunFactory, StepFactory
from tests.routers import REPLICA
from tests.task_helpers import Status
from tests.test_holder import dead_pid, holder_for  # noqa: F401 - dead_pid is a fixture

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", REPLICA])

RUNS = "/admin/leasejobs/run/"
LEASE = timedelta(hours=1)  # far longer than a test: only a takeover or a release ends it
OWNER = "01JQ0LEASEOWNER00000000000"

#: What no statement sent to the replica may name: the lease's columns (claims, fences, the
#: holder scan, a run read whole to judge its lease), the step ledger and the limits' rows.
LEASE_MARKS = ("lease_owner", "lease_holder", "leasejobs_step", "leasejobs_slot", "ratestate")


@dataclass
class Sent:
    """The statements each alias was sent, lower-cased and unquoted (SQLite and PostgreSQL
    quote with ``"``)."""

    replica: list[str] = field(default_factory=list)
    default: list[str] = field(default_factory=list)

    def judging_leases_on_replica(self) -> list[str]:
        """Statements sent to the replica that write or read what decides a lease."""
        return [
            sql
            for sql in self.replica
            if not sql.lstrip().startswith("select") or any(mark in sql for mark in LEASE_MARKS)
        ]


def _plain(captured: CaptureQueriesContext) -> list[str]:
    # PostgreSQL and SQLite quote names with ", MariaDB with `: read without either.
    return [
        query["sql"].replace('"', "").replace("`", "").lower()
        for query in captured.captured_queries
    ]


@contextmanager
def routed() -> Iterator[Sent]:
    """Reads of the app's models routed to the replica; what each alias was sent meanwhile."""
    sent = Sent()
    with (
        override_settings(DATABASE_ROUTERS=["tests.routers.ReadsToReplica"]),
        CaptureQueriesContext(connections[REPLICA]) as replica,
        CaptureQueriesContext(connections["default"]) as default,
    ):
        yield sent
    sent.replica, sent.default = _plain(replica), _plain(default)


def _is_due_read(sql: str) -> bool:
    """D1's snapshot: the due runs in the due index's order."""
    return "order by leasejobs_run.priority desc" in sql


def _leased(run: Run, holder: str | None = None) -> None:
    """Give *run* a begun lease of an hour, held by *holder* (this process by default)."""
    assert store.claim(run.pk, OWNER, LEASE, holder or current_holder(), takeover=False)
    assert store.begin(run.pk, OWNER, LEASE * ENTRY_MARGIN)


def _held_in_step(**columns) -> Run:
    """A held run whose pass stopped in step ``charge:102`` (A8)."""
    run = RunFactory(status=RunStatus.HELD, failure_code=FailureCode.INTERRUPTED, **columns)
    now = get_clock().now("default")
    StepFactory(run=run, name="charge:102", result=None, attempts=0, began_at=now)
    return run


# -- the drive ----------------------------------------------------------------------------


def test_replica_a_drive_reads_its_due_snapshot_there_and_claims_and_takes_over_on_the_write_alias(
    define, drive
):
    """D1 may follow the router: a lagging snapshot only delays pick-up, because the claim
    (L2) tests due-ness again where it writes. The claim, the takeover of a begun lease
    (L3), BEGIN (L4) and the commit go to the write alias, and nothing judging a lease is
    read from the replica."""
    seen = []
    spec = define("t.replica.drive", lambda p: seen.append(p.attempt) or p.done())
    fresh = start(spec, instance="fresh").run
    crashed = start(spec, instance="crashed").run
    _leased(crashed)
    Run.objects.filter(pk=crashed.pk).update(next_attempt_at=get_clock().now("default"))

    with routed() as sent:
        report = drive(spec)

    assert (report.completed, sorted(seen)) == (2, [1, 2]), report.as_dict()
    statuses = Run.objects.filter(pk__in=[fresh.pk, crashed.pk]).values_list("status", flat=True)
    assert set(statuses) == {RunStatus.DONE}
    assert any(_is_due_read(sql) for sql in sent.replica), sent.replica
    assert not any(_is_due_read(sql) for sql in sent.default)
    assert sent.judging_leases_on_replica() == []


def test_replica_a_snapshot_behind_the_primary_costs_a_lost_claim_never_a_second_pass(
    define, drive, monkeypatch
):
    """What a lagging replica can do to a drive: hand it a run that another worker has claimed
    and begun since. The claim (L2) tests due-ness where it writes, so it is lost and nothing
    runs twice; telling whose claim won (O2) is read on the write alias too."""
    calls = []
    spec = define("t.replica.lag", lambda p: calls.append(p.attempt) or p.done())
    run = start(spec).run
    read = driver.snapshot

    def behind(*args, **kwargs):
        keys = read(*args, **kwargs)
        _leased(run, "worker-7:4182:1:4026531836.7d7e505c")  # meanwhile, on the primary
        return keys

    lost: list[int] = []

    def observer():
        lost.append(1)

    monkeypatch.setattr(driver, "snapshot", behind)
    stats.lost_observers.append(observer)
    try:
        with routed() as sent:
            report = drive(spec)
    finally:
        stats.lost_observers.remove(observer)

    assert calls == [], report.as_dict()
    assert lost == [1]  # won by another worker process, as the write alias says
    assert Run.objects.get(pk=run.pk).lease_owner == OWNER
    assert any(_is_due_read(sql) for sql in sent.replica), sent.replica
    assert sent.judging_leases_on_replica() == []


def test_replica_l9_the_holder_scan_reads_the_write_alias(define, drive, dead_pid):  # noqa: F811
    """L9 releases a lease early only when its holder is provably gone: read from a replica,
    a lease its holder has since let go, or one a new claim now holds, would be judged by
    an owner and holder that are no longer the row's."""
    spec = define("t.replica.l9", lambda p: p.done(), lease=LEASE)
    run = start(spec).run
    _leased(run, holder_for(dead_pid, start=123))

    with routed() as sent:
        report = drive(spec)

    assert report.completed == 1, report.as_dict()
    assert "released early" in report.warnings[0].text
    scans = [sql for sql in sent.default if "lease_holder" in sql and sql.startswith("select")]
    assert scans, sent.default
    assert sent.judging_leases_on_replica() == []


def test_replica_r5_a_pass_reads_its_step_ledger_from_the_write_alias(define, drive):
    """A step recorded by an earlier pass returns its result instead of running again (R5):
    read from a lagging replica, the ledger could miss the record and run a completed step
    twice."""
    calls = []
    spec = define(
        "t.replica.ledger",
        lambda p: p.done(p.step("charge", lambda: calls.append("charged") or "new")),
    )
    run = start(spec).run
    StepFactory(run=run, name="charge", result='"recorded"')
    Run.objects.filter(pk=run.pk).update(has_steps=True)

    with routed() as sent:
        report = drive(spec)

    assert report.completed == 1, report.as_dict()
    assert calls == []  # the recorded result was found
    assert any("from leasejobs_step" in sql for sql in sent.default), sent.default
    assert sent.judging_leases_on_replica() == []


# -- operators ----------------------------------------------------------------------------


def test_replica_a3_a_cancel_reads_nothing_from_the_replica(define):
    """A cancel judges whether a pass may be in flight (its lease) to keep or free the key:
    that is decided where the lease is written."""
    spec = define("t.replica.cancel", lambda p: p.done())
    run = start(spec).run
    _leased(run)

    with routed() as sent:
        assert operators.cancel(run.pk, by="ops")

    assert Run.objects.get(pk=run.pk).status == RunStatus.CANCELLED
    assert sent.replica == []


def test_replica_a1_the_run_list_may_follow_the_router(admin_client):
    """The admin's lists may be read from a replica (SPEC §12): a list a moment old is still a
    list. (This is also what shows the router is in force for the tests beside it.)"""
    RunFactory(job="t.replica.list")

    with routed() as sent:
        response = admin_client.get(RUNS)

    assert response.status_code == 200
    assert "t.replica.list" in response.content.decode()
    assert any("from leasejobs_run" in sql for sql in sent.replica), sent.replica


def test_replica_a8_the_run_page_and_its_actions_read_the_write_alias(define, admin_client):
    """The run page judges the lease (A8), names a held run's step in flight and offers the
    actions valid for the run: read from a replica, it could show a lease as held that has
    expired, a step that is no longer in flight, or a button for a state the run has left."""
    leased = start(define("t.replica.page", lambda p: p.done())).run
    _leased(leased)
    held = _held_in_step(job="t.replica.held")

    with routed() as sent:
        leased_page = admin_client.get(f"{RUNS}{leased.pk}/change/")
        held_page = admin_client.get(f"{RUNS}{held.pk}/change/")
        confirm = admin_client.get(f"{RUNS}{held.pk}/release-resume/")
        cancelled = admin_client.post(f"{RUNS}{leased.pk}/cancel/")

    assert leased_page.status_code == held_page.status_code == confirm.status_code == 200
    assert "a pass in flight" in leased_page.content.decode()
    assert "charge:102" in held_page.content.decode()
    assert "charge:102" in confirm.content.decode()
    assert cancelled.status_code == 302
    assert Run.objects.get(pk=leased.pk).status == RunStatus.CANCELLED
    assert sent.replica == []


def test_replica_a8_leasejobs_status_reads_the_write_alias(define, capsys):
    """``leasejobs_status`` says whether each lease is held or expired and which step a held
    run stopped in: judged where the leases are written."""
    leased = start(define("t.replica.status", lambda p: p.done())).run
    _leased(leased)
    held = _held_in_step(job="t.replica.status-held")

    with routed() as sent:
        call_command("leasejobs_status")

    out = capsys.readouterr().out
    assert leased.pk in out
    assert held.pk in out
    assert "charge:102" in out
    assert sent.replica == []


def test_replica_s9_a_task_result_is_read_from_the_write_alias():
    """``get_result()`` says a task is RUNNING while its pass holds the lease: read from a
    replica, a task whose pass had begun would still read as waiting."""
    enqueued = tasks.add.enqueue(1, 2)
    _leased(Run.objects.get(pk=enqueued.id))

    with routed() as sent:
        result = tasks.add.get_result(enqueued.id)

    assert result.status == Status.RUNNING
    assert sent.replica == []
