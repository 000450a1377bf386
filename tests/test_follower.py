"""A finish that carries the BEGIN of the next run claimed ahead (SPEC §13 with L4-L7, W5).

The worker's monotonic clock is frozen (``worker_clock``), so a no-op pass
takes no time by it and a drive claims as far ahead as it may; a receiver
that moves the clock plays a pass's end that ran long.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import DataError, transaction

from django_leasejobs import RunStatus, signals, start, store
from django_leasejobs.models import Run
from django_leasejobs.pacing import BATCH_MAX, pace
from tests.utils import fresh

pytestmark = pytest.mark.django_db

LEASE = timedelta(seconds=60)
THIEF = "THIEFTHIEFTHIEFTHIEFTHIEF0"


def _learned(define, drive, name, handler):
    """A job whose passes this process knows are short: its drives claim ahead."""
    spec = define(name, handler, lease=LEASE)
    start(spec, instance="first")
    assert drive(spec).completed == 1
    assert pace.batch(spec) == BATCH_MAX
    return spec


@pytest.fixture
def on_completed():
    """Connect a ``run_completed`` receiver for one test (sent on commit: ``transaction=True``)."""
    connected = []

    def connect(receiver):
        signals.run_completed.connect(receiver, weak=False)
        connected.append(receiver)

    yield connect
    for receiver in connected:
        signals.run_completed.disconnect(receiver)


def _begun_unfinished(spec):
    return Run.objects.filter(job=spec.name, status=RunStatus.RUNNING, lease_began_at__isnull=False)


def test_s13_l4_each_finish_carries_the_next_runs_begin_and_every_run_is_begun_once(
    define, drive, worker_clock
):
    seen = []

    def handler(p):
        row = Run.objects.get(pk=p.run.id)
        seen.append((p.run.id, row.lease_owner, row.lease_began_at is not None))
        return p.done()

    spec = _learned(define, drive, "t.follow.each", handler)
    seen.clear()
    runs = [start(spec, instance=f"r{n}").run for n in range(BATCH_MAX)]
    report = drive(spec)
    assert report.completed == BATCH_MAX
    assert sorted(run_id for run_id, _, _ in seen) == sorted(run.pk for run in runs)
    assert len({owner for _, owner, _ in seen}) == BATCH_MAX  # a token each (L6)
    assert all(began for _, _, began in seen)  # every handler ran on a begun lease (L4)
    for run in runs:
        stored = fresh(run)
        assert stored.status == RunStatus.DONE
        assert (stored.attempts, stored.lease_owner, stored.lease_began_at) == (0, None, None)


def test_l4_a_carried_begin_that_finds_the_next_claim_gone_begins_nothing_and_the_finish_stands(
    define, drive, worker_clock
):
    ran = []

    def handler(p):
        if not ran:  # the runs claimed behind this pass change hands meanwhile
            behind = Run.objects.filter(job=p.run.job, lease_began_at__isnull=True)
            behind.exclude(pk=p.run.id).update(lease_owner=THIEF)
        ran.append(p.run.id)
        return p.done()

    spec = _learned(define, drive, "t.follow.gone", handler)
    ran.clear()
    runs = [start(spec, instance=f"g{n}").run for n in range(4)]
    report = drive(spec)
    assert report.completed == 1
    assert len(ran) == 1  # no other handler ran: no BEGIN of theirs wrote
    (finished,) = [run for run in runs if run.pk == ran[0]]
    assert fresh(finished).status == RunStatus.DONE  # the commit stood on its own
    for run in runs:
        if run.pk != finished.pk:
            stored = fresh(run)
            assert stored.lease_owner == THIEF  # untouched by this worker
            assert stored.lease_began_at is None
            assert (stored.attempts, stored.admission_misses) == (0, None)


@pytest.mark.django_db(transaction=True)
def test_w5_a_run_begun_in_the_last_commit_is_driven_though_the_drive_was_told_to_stop(
    define, drive, worker_clock, on_completed
):
    stopping = []
    on_completed(lambda **kwargs: stopping.append(True))  # after the commit that began the next
    spec = _learned(define, drive, "t.follow.stop", lambda p: p.done())
    stopping.clear()
    runs = [start(spec, instance=f"s{n}").run for n in range(BATCH_MAX)]
    report = drive(spec, stop=lambda: bool(stopping))
    assert report.completed == 2  # the first, and the one whose pass its commit began
    assert not _begun_unfinished(spec).exists()  # no pass left begun and undriven
    left = [fresh(run) for run in runs if fresh(run).status == RunStatus.RUNNING]
    assert len(left) == BATCH_MAX - 2
    for run in left:  # given back, uncharged (L2): nothing more began once stopping
        assert (run.lease_owner, run.lease_began_at, run.attempts) == (None, None, 0)


@pytest.mark.django_db(transaction=True)
def test_l7_a_carried_begin_is_renewed_before_its_handler_when_the_last_passes_end_ran_long(
    define, drive, worker_clock, on_completed, monkeypatch
):
    ran, renewed = [], []
    renew = store.renew

    def counted(run_id, owner, lease, **options):
        renewed.append(run_id)
        return renew(run_id, owner, lease, **options)

    monkeypatch.setattr(store, "renew", counted)
    spec = _learned(define, drive, "t.follow.slow", lambda p: ran.append(p.run.id) or p.done())
    ran.clear()

    def slow_receiver(**kwargs):
        if len(ran) == 1:
            worker_clock.now += 50  # 10 s of the next lease left: under its 15 s margin
            carried.extend(_begun_unfinished(spec).values_list("pk", flat=True))

    carried: list[str] = []
    on_completed(slow_receiver)
    runs = [start(spec, instance=f"l{n}").run for n in range(3)]
    report = drive(spec)
    assert report.completed == 3
    assert len(carried) == 1  # the next pass had begun when the receiver ran
    assert renewed == carried  # ... and was renewed before its handler (L7)
    assert set(ran) == {run.pk for run in runs}


@pytest.mark.django_db(transaction=True)
def test_l6_a_carried_begin_whose_lease_was_taken_meanwhile_calls_no_handler(
    define, drive, worker_clock, on_completed
):
    ran = []
    spec = _learned(define, drive, "t.follow.taken", lambda p: ran.append(p.run.id) or p.done())
    ran.clear()
    taken: list[str] = []

    def receiver(**kwargs):
        if len(ran) == 1:
            worker_clock.now += 70  # past the whole lease: another worker took the run over
            taken.extend(_begun_unfinished(spec).values_list("pk", flat=True))
            Run.objects.filter(pk__in=taken).update(lease_owner=THIEF)

    on_completed(receiver)
    [start(spec, instance=f"t{n}").run for n in range(3)]
    report = drive(spec)
    assert len(taken) == 1
    assert taken[0] not in ran  # its handler never ran here
    assert report.superseded == 1
    assert Run.objects.get(pk=taken[0]).lease_owner == THIEF  # nothing written over the thief's


def test_s13_a_pair_the_database_refuses_sends_the_finish_alone_and_begins_the_next_alone(
    define, drive, worker_clock, monkeypatch
):
    refused = []

    def refusing(*args, **kwargs):
        refused.append(args[0].run.pk)
        with transaction.atomic():  # a real failed statement, as the database would
            raise DataError("value too long for type character varying(26)")

    monkeypatch.setattr(store, "commit_and_begin", refusing)
    spec = _learned(define, drive, "t.follow.refused", lambda p: p.done())
    runs = [start(spec, instance=f"f{n}").run for n in range(4)]
    report = drive(spec)
    assert refused  # the pair was tried ...
    assert report.completed == 4  # ... and each run finished alone, its BEGIN sent alone
    assert report.failed == 0
    assert {fresh(run).status for run in runs} == {RunStatus.DONE}
