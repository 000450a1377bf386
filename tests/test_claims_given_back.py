"""§13 with L2 (revision 3): runs claimed ahead never wait out a pass that runs long.

A drive claims the next runs of a job whose passes have been short. When
one pass then runs long, the runs claimed behind it are given back (due
now, uncharged, announced on PostgreSQL) for another worker to take --
shown with two real worker processes and the handlers' own log of when
each pass began and ended.
"""

from __future__ import annotations

import pytest

from django_leasejobs import RunStatus, start
from django_leasejobs.models import Run
from tests.models import PassLog
from tests.processes import django_command
from tests.utils import stop_worker, wait_for, waited_out

pytestmark = pytest.mark.django_db(transaction=True)

JOB = "tests.mostly_quick"
#: The slow pass is held until the runs behind it are done (tests/jobs.py ``_held``),
#: for at most this long: only runs that wait it out let it run its length.
SLOW = 60


def test_s13_runs_claimed_behind_a_long_pass_are_given_back_to_an_idle_worker():
    quick = {"sleep": 0}
    before = [start(JOB, quick, instance=f"a{n:02}").run for n in range(12)]
    slow = start(JOB, {"sleep": SLOW, "until_done": "c"}, instance="b-slow").run
    after = [start(JOB, quick, instance=f"c{n:02}").run for n in range(9)]
    first = django_command("rundueJobs", "--loop", "--job", JOB)
    second = None
    try:
        # The first worker learns the job's passes are short, claims ahead, reaches the slow one.
        wait_for(lambda: PassLog.objects.filter(run_id=slow.pk).exists(), "the slow pass to begin")
        assert all(run.status == RunStatus.DONE for run in Run.objects.filter(pk__in=before))
        second = django_command("rundueJobs", "--loop", "--interval", "0.2", "--job", JOB)
        wait_for(
            lambda: not Run.objects.filter(job=JOB, status="running").exists(),
            "every run to end",
            SLOW * 2,
        )
    finally:
        for worker in (first, second):
            if worker is not None:
                stop_worker(worker)
    waited = waited_out(slow, after)
    # Before: the runs claimed behind the slow pass began only once it had ended.
    assert not waited, f"{waited} waited out the {SLOW} s pass"
    charged = Run.objects.filter(pk__in=[r.pk for r in after], attempts__gt=0)
    assert not charged.exists()  # given back uncharged (L2)
