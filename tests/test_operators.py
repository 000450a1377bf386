"""Operator functions (SPEC §3): cancel, retry, release -- each a compare-and-set."""

from __future__ import annotations

import pytest

from django_leasejobs import RunStatus, cancel, release, retry, start
from django_leasejobs.models import Run
from tests.factories import RunFactory

pytestmark = pytest.mark.django_db


def test_cancel_a_live_run_once():
    run = start("tests.walk", {"a": 1}).run
    assert cancel(run.pk, by="alice")
    cancelled = Run.objects.get(pk=run.pk)
    assert cancelled.status == RunStatus.CANCELLED
    assert cancelled.failure_code == "cancelled"
    assert cancelled.live_key is None
    assert cancelled.ended_at is not None
    assert "alice" in cancelled.last_error
    assert not cancel(run.pk)  # already finished: nothing to do


def test_cancel_a_held_run():
    run = RunFactory(status=RunStatus.HELD)
    assert cancel(run.pk)


def test_retry_starts_a_new_run_with_the_same_job_instance_and_payload():
    old = RunFactory(job="tests.walk", instance="x", payload='{"a":[1]}', status=RunStatus.FAILED)
    result = retry(old.pk, by="bob")
    assert not result.joined
    assert result.run.pk != old.pk
    assert (result.run.job, result.run.instance, result.run.payload) == (
        "tests.walk",
        "x",
        '{"a":[1]}',
    )
    assert result.run.status == RunStatus.RUNNING


def test_retry_joins_a_run_that_went_live_meanwhile():
    old = RunFactory(job="tests.walk", instance="x", status=RunStatus.CANCELLED)
    live = start("tests.walk", instance="x").run
    result = retry(old.pk)
    assert result.joined
    assert result.run.pk == live.pk


@pytest.mark.parametrize("status", [RunStatus.RUNNING, RunStatus.DONE, RunStatus.HELD])
def test_retry_refuses_runs_that_are_not_failed_or_cancelled(status):
    run = RunFactory(job="tests.walk", status=status)
    with pytest.raises(ValueError, match=status):
        retry(run.pk)


def test_release_only_acts_on_held_runs():
    run = start("tests.fragile").run
    assert not release(run.pk)
    Run.objects.filter(pk=run.pk).update(status=RunStatus.HELD)
    assert release(run.pk, resume=True)
    resumed = Run.objects.get(pk=run.pk)
    assert resumed.status == RunStatus.RUNNING
    assert resumed.next_attempt_at is not None
    assert not release(run.pk)


def test_a8_release_fail_keeps_who_failed_it_and_their_reason():
    reasoned, plain = (RunFactory(job="tests.fragile", status=RunStatus.HELD) for _ in range(2))
    assert release(reasoned.pk, resume=False, by="alice", note=" card 102 charged, refunded ")
    assert release(plain.pk, resume=False, by="bob")  # the signature of before still works
    failed = Run.objects.get(pk=reasoned.pk)
    assert failed.status == RunStatus.FAILED
    assert failed.last_error == "interrupted; failed by alice: card 102 charged, refunded"
    assert Run.objects.get(pk=plain.pk).last_error == "interrupted; failed by bob"


def test_a8_a_release_note_longer_than_200_characters_is_refused_before_anything_changes():
    from django_leasejobs.exceptions import InvalidNote

    run = RunFactory(job="tests.fragile", status=RunStatus.HELD)
    with pytest.raises(InvalidNote):
        release(run.pk, resume=False, by="alice", note="x" * 201)
    assert Run.objects.get(pk=run.pk).status == RunStatus.HELD
