"""C5 (revision 3): a looser or removed limit is not waited out under the old rule.

A job's limit is code; changing it is a deploy, so each test drives the same
job (``tests.rated.changing``) with a worker process under the old rule, then
with one under the new rule (``LEASEJOBS_TEST_RATE``), and reads when the runs
the old rule held back really began.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_leasejobs import RunStatus, start
from django_leasejobs.clock import get_clock
from django_leasejobs.models import RateState, Run
from tests.models import PassLog
from tests.processes import Lines, django_command
from tests.utils import stop_worker, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

JOB = "tests.rated.changing"


def _worker(rule: str, *args: str):
    env = {"LEASEJOBS_TEST_RATE": rule}
    return django_command("rundueJobs", "--loop", "--job", JOB, *args, env=env)


def _began() -> int:
    return PassLog.objects.count()


def _held_back_by_the_old_rule(runs: int) -> None:
    """One begin under Rate(1, per=120 s); the others held back two minutes."""
    for n in range(runs):
        start(JOB, {"sleep": 0}, instance=f"old-{n}")
    old = _worker("1/120")
    try:
        wait_for(
            lambda: _began() == 1 and _throttled() == runs - 1,
            "one begin and the rest throttled",
            worker=old,
        )
    finally:
        stop_worker(old)
    later = get_clock().now() + timedelta(seconds=100)
    waiting = Run.objects.filter(job=JOB, status=RunStatus.RUNNING)
    assert all(due > later for due in waiting.values_list("next_attempt_at", flat=True))
    assert RateState.objects.get(job=JOB).tat > later


def _throttled() -> int:
    return Run.objects.filter(job=JOB, status=RunStatus.RUNNING).exclude(throttled_by="").count()


@pytest.mark.parametrize("new_rule", ["100/1", "none"], ids=["loosened", "removed"])
def test_c5_a_loosened_or_removed_rate_is_not_waited_out(new_rule):
    _held_back_by_the_old_rule(5)
    new = _worker(new_rule)
    try:
        # The four held back, and a run started after the deploy, begin at once --
        # not when the old rule's two minutes are up (past this wait's deadline).
        start(JOB, {"sleep": 0}, instance="new")
        wait_for(lambda: _began() == 6, "six begins", worker=new)
    finally:
        stop_worker(new)
    assert not Run.objects.filter(job=JOB, status=RunStatus.RUNNING).exists()
    if new_rule == "none":
        assert not RateState.objects.filter(job=JOB).exists()


def test_c5_an_unchanged_rule_is_judged_as_before():
    """A worker restarted under the same rule holds the runs back exactly as long."""
    _held_back_by_the_old_rule(3)
    due = dict(
        Run.objects.filter(job=JOB, status=RunStatus.RUNNING).values_list("pk", "next_attempt_at")
    )
    tat = RateState.objects.get(job=JOB).tat
    # -v 2: every drive prints its report, so the test counts drives, not seconds.
    again = _worker("1/120", "--interval", "0.2", "-v", "2")
    drives = Lines(again.stdout)
    try:
        drives.wait_for(lambda line: "attempted=" in line, "three drives", count=3)
    finally:
        again.terminate()
        code = again.wait(60)
    assert code == 0, drives.seen
    assert _began() == 1
    assert RateState.objects.get(job=JOB).tat == tat
    after = dict(
        Run.objects.filter(job=JOB, status=RunStatus.RUNNING).values_list("pk", "next_attempt_at")
    )
    assert after == due
