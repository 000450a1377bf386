"""F3 Ambiguous commit: the database applied a write, and its reply was lost.

A claim (L2) or a BEGIN (L4) whose reply was lost, by a worker that lives on,
is given back uncharged once the database answers again, fenced on its own
owner token: the handler never ran, so it costs no attempt and holds no run.
A takeover claim so lost stays the takeover it was (L3). A pass's outcome
whose reply was lost is the drive's error: never applied twice, never
reported completed on a guess.

Two ways to lose a reply. In this process (every backend): the statement is
sent and applied, then the connection reads as gone and the caller gets an
``OperationalError`` (:func:`reply_lost`, a Django ``execute_wrapper``). With
a real worker process (PostgreSQL, MariaDB): the fault proxy lets the
statement reach the server and cuts the connection once the server's whole
reply has come back, before the worker reads it
(:meth:`~tests.faults.proxy.FaultProxy.cut_after_reply`).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
from django.conf import settings
from django.db import OperationalError, connection, connections
from django.db.models.functions import Now

from django_leasejobs import RunStatus, run_due_jobs, start, store
from django_leasejobs.holder import current_holder
from django_leasejobs.ids import new_owner
from django_leasejobs.models import Run
from django_leasejobs.pacing import pace
from django_leasejobs.store import unanswered
from django_leasejobs.store.base import now as database_now
from django_leasejobs.store.unanswered import give_back_unanswered, note, noted
from tests.faults.audit import invocations, settled
from tests.faults.fleet import Fleet
from tests.faults.jobs import UNSAFE, WALK
from tests.faults.proxy import FaultProxy
from tests.utils import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

#: One pass of no step: the handler's invocation is the only trace it ran.
ONE_PASS = {"passes": 1, "steps": 0, "step_seconds": 0}

on_a_server = pytest.mark.elsewhere(
    settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"),
    reason="SQLite has no connection for a proxy to cut",
)


@pytest.fixture(autouse=True)
def _logged(tmp_path, monkeypatch):
    """The jobs log each invocation here; nothing is left noted by an earlier test."""
    monkeypatch.setenv("LEASEJOBS_FAULTS_DIR", str(tmp_path))
    monkeypatch.setattr(unanswered, "_noted", {})


def _set(field: str) -> str:
    """The start of an ``UPDATE``'s SET list that writes *field* first, as the backend quotes it."""
    quote = "`" if connection.vendor == "mysql" else '"'
    return f"SET {quote}{field}{quote} = "


#: The first column each statement sets: the claim (L2), BEGIN (L4), and a pass's commit (R3).
CLAIM, BEGIN, COMMIT = "lease_owner", "lease_began_at", "cursor"


@contextlib.contextmanager
def reply_lost(field: str) -> Iterator[dict[str, Any]]:
    """The first statement that sets *field* first is applied, then its reply is lost.

    The statement runs and commits (autocommit) on this thread's connection;
    then the caller gets an ``OperationalError`` and the connection reads as
    unusable -- as after a server that went away -- until it is closed.
    """
    db = connections["default"]  # this thread's
    state: dict[str, Any] = {"lost": False, "cuts": 0}
    marker = _set(field).lower()

    def applied_then_lost(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if not state["cuts"] and marker in sql.lower():
            state["cuts"] += 1
            state["lost"] = True
            db.errors_occurred = True  # as Django's error wrapper marks it
            raise OperationalError("server closed the connection unexpectedly (test)")
        return result

    is_usable, close = db.is_usable, db.close

    def closing() -> None:
        state["lost"] = False
        close()

    def usable() -> bool:
        return not state["lost"] and is_usable()

    with (
        mock.patch.object(db, "is_usable", usable),
        mock.patch.object(db, "close", closing),
        db.execute_wrapper(applied_then_lost),
    ):
        yield state


def _row(run_id: str) -> Run:
    return Run.objects.get(pk=run_id)


def _invoked(tmp_path, run_id: str) -> int:
    return sum(1 for one in invocations(tmp_path) if one.run_id == run_id)


# -- in this process, every backend -----------------------------------------------------------


def test_f3_a_begin_whose_reply_was_lost_is_given_back_uncharged_and_never_ran(tmp_path):
    """F3 + L4: BEGIN applied, its reply lost. The drive reports the run's error and
    calls no handler; before it returns, the claim is given back fenced on its owner
    token: due now, unclaimed, unbegun, no attempt charged. The next drive runs it once."""
    run_id = start(WALK, ONE_PASS).run.pk
    with reply_lost(BEGIN) as cut:
        report = run_due_jobs(jobs=[WALK])
    assert cut["cuts"] == 1
    assert [note.run_id for note in report.errors] == [run_id]
    assert report.completed == 0
    row = _row(run_id)
    assert (row.status, row.lease_owner, row.lease_began_at, row.attempts) == (
        RunStatus.RUNNING,
        None,
        None,
        0,
    )
    assert Run.objects.filter(pk=run_id, next_attempt_at__lte=database_now()).exists()  # due now
    assert _invoked(tmp_path, run_id) == 0
    assert noted() == []

    again = run_due_jobs(jobs=[WALK])
    assert (again.completed, again.errors) == (1, [])
    assert (_row(run_id).status, _row(run_id).attempts) == (RunStatus.DONE, 0)
    assert _invoked(tmp_path, run_id) == 1


def test_f3_a_claim_whose_reply_was_lost_is_given_back_uncharged(tmp_path):
    """F3 + L2: the claim applied, its reply lost: given back at once, due now and
    uncharged, rather than held for its whole lease."""
    run_id = start(WALK, ONE_PASS).run.pk
    with reply_lost(CLAIM) as cut:
        report = run_due_jobs(jobs=[WALK])
    assert cut["cuts"] == 1
    assert [note.run_id for note in report.errors] == [run_id]
    row = _row(run_id)
    assert (row.lease_owner, row.lease_began_at, row.attempts) == (None, None, 0)
    assert Run.objects.filter(pk=run_id, next_attempt_at__lte=database_now()).exists()
    assert _invoked(tmp_path, run_id) == 0
    assert run_due_jobs(jobs=[WALK]).completed == 1
    assert _invoked(tmp_path, run_id) == 1


@pytest.mark.parametrize("field", [CLAIM, BEGIN])
def test_f3_claims_made_ahead_are_given_back_when_a_reply_was_lost(tmp_path, monkeypatch, field):
    """F3 + §13: the job's passes are known short, so the drive claims five runs in one
    statement. That statement's reply lost -- or the first BEGIN's -- the drive stops,
    and every claim it held is given back uncharged before it returns, not left to
    wait out its lease."""
    monkeypatch.setattr(pace, "_seconds", {WALK: 0.001})
    run_ids = [start(WALK, ONE_PASS, instance=f"ahead-{n}").run.pk for n in range(5)]
    with reply_lost(field) as cut:
        report = run_due_jobs(jobs=[WALK])
    assert cut["cuts"] == 1
    assert report.aborted
    rows = Run.objects.filter(pk__in=run_ids)
    assert set(rows.values_list("lease_owner", "lease_began_at", "attempts")) == {(None, None, 0)}
    # "Due now" on the clock the give-back wrote with: on SQLite Django's Now() is
    # text of milliseconds, which sorts before the store's six-digit text of the same one.
    assert rows.filter(next_attempt_at__lte=database_now()).count() == 5
    assert invocations(tmp_path) == []
    assert run_due_jobs(jobs=[WALK]).completed == 5


def _crashed(run_id: str) -> None:
    """Make *run_id* look like a pass that began and stopped reporting: its lease past."""
    Run.objects.filter(pk=run_id).update(
        lease_owner=new_owner(),
        lease_began_at=Now() - timedelta(minutes=1),
        next_attempt_at=Now() - timedelta(seconds=1),
    )


def test_f3_l3_a_takeover_claim_whose_reply_was_lost_stays_a_takeover(tmp_path):
    """F3 + L3: a takeover claim charges the interrupted pass one attempt. Its reply
    lost, it is given back as the takeover it was -- begun, its charge undone -- so
    the next claim charges it exactly once and, the job not safe to repeat, holds the
    run: the handler is never called again."""
    run_id = start(UNSAFE, ONE_PASS).run.pk
    _crashed(run_id)
    with reply_lost(CLAIM) as cut:
        run_due_jobs(jobs=[UNSAFE])
    assert cut["cuts"] == 1
    row = _row(run_id)
    assert row.status == RunStatus.RUNNING
    assert row.attempts == 0  # the charge given back with the claim ...
    assert row.lease_began_at is not None  # ... which is a takeover again
    report = run_due_jobs(jobs=[UNSAFE])
    assert report.held == 1
    row = _row(run_id)
    assert (row.status, row.failure_code, row.attempts) == (RunStatus.HELD, "interrupted", 1)
    assert _invoked(tmp_path, run_id) == 0


def test_f3_l3_a_takeover_claim_lost_by_a_worker_that_died_still_holds_the_run(
    tmp_path, monkeypatch
):
    """F3 + L3, the safe side: a takeover claim's reply lost, and its worker dies before it
    can give it back (here: it never tries). Its lease expires; the next claim is a fresh
    one, yet the takeover it follows is judged: the job not safe to repeat, the run is
    held, charged once, and its handler never called."""
    monkeypatch.setattr("django_leasejobs.driver.give_back_unanswered", lambda: 0)
    run_id = start(UNSAFE, ONE_PASS).run.pk
    _crashed(run_id)
    with reply_lost(CLAIM) as cut:
        run_due_jobs(jobs=[UNSAFE])
    assert cut["cuts"] == 1
    assert _row(run_id).attempts == 1  # the takeover's charge; its claim holds the run
    Run.objects.filter(pk=run_id).update(next_attempt_at=Now() - timedelta(seconds=1))
    report = run_due_jobs(jobs=[UNSAFE])
    assert report.held == 1
    row = _row(run_id)
    assert (row.status, row.failure_code, row.attempts) == (RunStatus.HELD, "interrupted", 1)
    assert _invoked(tmp_path, run_id) == 0


def test_f3_the_give_back_is_fenced_on_its_own_owner_token(tmp_path):
    """F3 + L6: by the time the database answers again, the lease expired and another
    worker took the run over: giving back the lost claim changes nothing of theirs."""
    run_id = start(WALK, ONE_PASS).run.pk
    mine = new_owner()
    assert store.claim_and_read(
        run_id, mine, timedelta(seconds=30), current_holder(), takeover=False
    )
    assert store.begin(run_id, mine, timedelta(0))
    note(run_id, mine)
    theirs = new_owner()
    Run.objects.filter(pk=run_id).update(lease_owner=theirs, lease_began_at=Now())
    before = _row(run_id)

    assert give_back_unanswered() == 0
    after = _row(run_id)
    assert (after.lease_owner, after.lease_began_at, after.next_attempt_at) == (
        theirs,
        before.lease_began_at,
        before.next_attempt_at,
    )
    assert noted() == []  # tried once, answered: not tried again


def test_f3_an_outcome_whose_reply_was_lost_is_an_error_never_completed_on_a_guess(tmp_path):
    """F3 + R3: the pass's commit applied, its reply lost. The drive reports the pass as
    an error, not completed; the run is as the commit left it (done), the commit is not
    sent again, and nothing runs it again."""
    run_id = start(WALK, ONE_PASS).run.pk
    with reply_lost(COMMIT) as cut:
        report = run_due_jobs(jobs=[WALK])
    assert cut["cuts"] == 1
    assert report.completed == 0
    assert [note.run_id for note in report.errors] == [run_id]
    assert (_row(run_id).status, _row(run_id).attempts) == (RunStatus.DONE, 0)
    assert run_due_jobs(jobs=[WALK]).attempted == 0
    assert _invoked(tmp_path, run_id) == 1


def test_f3_an_advance_that_went_on_whose_reply_was_lost_gives_the_next_pass_back(tmp_path):
    """F3 + R3 + L4: in a drive of several passes, the advance that claims and begins the
    next pass (where the backend goes on, django_leasejobs/going_on.py) applied, its reply
    lost. The advance stands and is not sent again; the next pass, never run, is given
    back uncharged, fenced on its own owner token: due now, unclaimed, unbegun. The next
    drive runs the passes left, each once."""
    run_id = start(WALK, {**ONE_PASS, "passes": 3}).run.pk
    with reply_lost(COMMIT) as cut:
        report = run_due_jobs(jobs=[WALK], max_passes=3)
    assert cut["cuts"] == 1
    assert [note.run_id for note in report.errors] == [run_id]
    row = _row(run_id)
    assert (row.status, row.cursor, row.lease_owner, row.lease_began_at, row.attempts) == (
        RunStatus.RUNNING,
        "1",
        None,
        None,
        0,
    )
    assert Run.objects.filter(pk=run_id, next_attempt_at__lte=database_now()).exists()  # due now
    assert _invoked(tmp_path, run_id) == 1
    assert noted() == []

    again = run_due_jobs(jobs=[WALK], max_passes=3)
    assert (again.completed, again.errors) == (1, [])
    assert (_row(run_id).status, _row(run_id).attempts) == (RunStatus.DONE, 0)
    assert _invoked(tmp_path, run_id) == 3


# -- real worker processes, the reply cut by the proxy ----------------------------------------


def _through_proxy(tmp_path, job: str, field: str, concurrency: int):
    vendor = "postgresql" if connection.vendor == "postgresql" else "mysql"
    proxy = FaultProxy(vendor).start()
    fleet = Fleet(tmp_path, [job], concurrency=concurrency)
    return proxy, fleet


@on_a_server
@pytest.mark.faults
@pytest.mark.parametrize("concurrency", [1, 4])
@pytest.mark.parametrize("field", [CLAIM, BEGIN])
def test_f3_a_worker_that_lives_on_gives_back_a_claim_or_begin_cut_after_its_reply(
    tmp_path, concurrency, field
):
    """F3 with a real ``rundueJobs --loop`` worker: the proxy cuts its connection once the
    server has answered the worker's first claim (or BEGIN), before the worker reads it.
    The worker lives on: the claim is given back uncharged, and the run -- of a job not
    safe to repeat, which a takeover would hold -- is driven once, done with no attempt
    charged and its handler called once."""
    run_ids = [start(UNSAFE, ONE_PASS, instance=f"f3-{n}").run.pk for n in range(3)]
    proxy, fleet = _through_proxy(tmp_path, UNSAFE, field, concurrency)
    try:
        proxy.cut_after_reply(_set(field).encode())
        # Unprepared: a statement psycopg prepares goes first alone, its reply the PREPARE's.
        worker = fleet.start(port=proxy.port, env={"LEASEJOBS_TEST_PREPARE": "off"})
        assert settled(run_ids, 60), (Run.objects.filter(pk__in=run_ids).values(), worker.log())
        assert proxy.cuts == 1, worker.log()
    finally:
        fleet.stop()
        proxy.stop()
    rows = Run.objects.filter(pk__in=run_ids)
    assert set(rows.values_list("status", "attempts", "failure_code")) == {
        (RunStatus.DONE, 0, "")
    }, (list(rows.values()), worker.log())
    assert sorted(one.run_id for one in invocations(tmp_path)) == sorted(run_ids)
    assert "given back uncharged" in worker.log()
    wait_for(lambda: worker.process.poll() is not None, "the worker to exit")


@on_a_server
@pytest.mark.faults
@pytest.mark.parametrize("concurrency", [1, 4])
def test_f3_a_commit_cut_after_its_reply_is_an_error_and_the_run_stays_done(tmp_path, concurrency):
    """F3 + R3 with a real worker: the proxy cuts the connection once the server has
    answered the worker's first commit. That pass is reported as an error, never as
    completed; its run is as the commit left it -- done, no attempt charged -- and is
    never run again: each handler was called once, and the worker's reports count one
    completion fewer than there are runs."""
    run_ids = [start(WALK, ONE_PASS, instance=f"f3c-{n}").run.pk for n in range(3)]
    proxy, fleet = _through_proxy(tmp_path, WALK, COMMIT, concurrency)
    try:
        proxy.cut_after_reply(_set(COMMIT).encode())
        worker = fleet.start(port=proxy.port, env={"LEASEJOBS_TEST_PREPARE": "off"})
        assert settled(run_ids, 60), (Run.objects.filter(pk__in=run_ids).values(), worker.log())
        assert proxy.cuts == 1, worker.log()
    finally:
        fleet.stop()
        proxy.stop()
    rows = Run.objects.filter(pk__in=run_ids)
    assert set(rows.values_list("status", "attempts")) == {(RunStatus.DONE, 0)}
    assert sorted(one.run_id for one in invocations(tmp_path)) == sorted(run_ids)
    log = worker.log()
    completed = sum(int(n) for n in re.findall(r"\bcompleted=(\d+)", log))
    errors = sum(int(n) for n in re.findall(r"\berrors=(\d+)", log))
    assert (completed, errors) == (len(run_ids) - 1, 1), log
