"""W5 + §14: a job's limits hold across the threads of one process as across processes.

Two ``rundueJobs --loop --concurrency 4`` workers: eight threads contend for a
limited job's slot (C2) or rate (C3). Each handler logs its interval
(``PassLog``); it runs inside its pass's slot and after its rate token, so
the log shows what the limit let through.
"""

from __future__ import annotations

import itertools

import pytest

from django_leasejobs import start_many
from tests.models import PassLog
from tests.test_concurrency import stop_all
from tests.test_limits_processes import (
    NS,
    assert_each_run_done_once,
    most_at_once,
    stamped_begins,
    wait_until_done,
    workers,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]


def drive_with_threads(job, runs, count=2, concurrency=4):
    """Drive *runs* with *count* ``--concurrency`` workers until done; their PassLog rows."""
    fleet = workers(job, count, "--concurrency", str(concurrency))
    try:
        wait_until_done(job, len(runs))
    finally:
        reaped = stop_all(fleet)
    assert [code for code, _out, _err in reaped] == [0] * count, [err for *_, err in reaped]
    return list(PassLog.objects.filter(run_id__in=[run.pk for run in runs]))


def test_w5_c2_one_slot_holds_across_threads_and_processes():
    """W5 + C2: ``tests.w5.limited_one`` (``Limit(concurrency=1)``, 60 s lease), eight runs
    of 0.3 s, two processes of four threads: never two of its handlers at one instant,
    though eight threads could run eight; every run done once, nothing charged."""
    job = "tests.w5.limited_one"
    runs = [r.run for r in start_many(job, [(f"r{n}", {"sleep": 0.3}) for n in range(8)])]
    logs = drive_with_threads(job, runs)
    assert_each_run_done_once(runs, logs)
    assert most_at_once([(log.started_ns, log.ended_ns) for log in logs]) == 1


def test_w5_c3_a_rate_holds_across_threads_and_processes():
    """W5 + C3: ``tests.rated`` (``Rate(5, per=2 s)``: a begin per 0.4 s), twelve runs of
    1 s -- so passes overlap on the threads -- two processes of four threads: the
    passes BEGIN at least about 0.4 s apart on the database's clock (``Begun``, not the
    handlers' own stamps, which a busy machine delays by varying amounts), and no 2 s
    window holds more than 6 begins (5, and 1 across its edges)."""
    job = "tests.rated"
    items = [(f"r{n}", {"sleep": 1.0, "stamp_begin": True}) for n in range(12)]
    runs = [r.run for r in start_many(job, items)]
    logs = drive_with_threads(job, runs)
    assert_each_run_done_once(runs, logs)
    begins = stamped_begins(runs)
    assert len(begins) == 12
    gaps = [(b - a) / NS for a, b in itertools.pairwise(begins)]
    assert min(gaps) >= 0.4 - 0.15, [round(gap, 3) for gap in gaps]
    crowded = max(
        sum(1 for b in begins[i:] if b - first <= 2 * NS) for i, first in enumerate(begins)
    )
    assert crowded <= 6
    # The passes did overlap on the threads: the rate, not a lack of threads, spaced them.
    assert most_at_once([(log.started_ns, log.ended_ns) for log in logs]) >= 2
