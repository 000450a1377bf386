"""S1 (revision 2) with real processes: two deployments that disagree about a
job's expression, as during a rolling deploy, both drive the one Schedule row.

Before revision 2 each drive saw "a changed expression" and rescheduled from
now, so a schedule whose due times are seconds apart never fired at all.
"""

from __future__ import annotations

import pytest

from django_leasejobs.models import Missed, Run, Schedule
from tests.processes import python

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]

SECONDS = 15
#: croniter's sixth field is seconds: every 2 s in one deployment, every 3 s in the other.
EXPRESSIONS = ("* * * * * */2", "* * * * * */3")


def test_s1_two_deployments_that_disagree_lose_no_due_time_of_either():
    processes = [
        python(f"from tests.processes import deployment; print(deployment({e!r}, {SECONDS}))")
        for e in EXPRESSIONS
    ]
    outputs = [process.communicate(timeout=SECONDS + 120) for process in processes]
    for process, (out, err) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, err
        assert out.strip() == "0", err  # no drive reported an error (stderr says which)
    schedule = Schedule.objects.get(job="t.rolling")
    assert schedule.enabled  # neither deployment disabled the other's row
    fired = Run.objects.filter(job="t.rolling").count()
    # Whichever expression the row held, its due times fired: at least every
    # 3 s over the window, less the first and last due time.
    assert fired >= SECONDS // 3 - 2, fired
    assert not Missed.objects.filter(job="t.rolling").exists()
