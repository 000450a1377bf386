"""F6: a worker whose wall clock jumps an hour, forward or back, mid-drive (L1, R10, L10, S2).

A real ``rundueJobs --loop`` worker runs under libfaketime, its offset read
from a file on every clock read (``FAKETIME_TIMESTAMP_FILE`` with
``FAKETIME_NO_CACHE``): the test writes ``+1h`` or ``-1h`` there while the
worker drives. Only the wall clock moves, as on a machine whose clock is set;
the monotonic clock counts on. An honest worker drives the same walk runs
beside it, so a lease the jumping worker let end early would be taken over.

What the database decides must not change: every pass is invoked exactly
once (no lease ended early, no timeout or heartbeat misfired: either would
invoke a pass again), no lease is ever set to end later than one lease from
the database's now, and a schedule's due time fires exactly once, not
before it is due, with nothing recorded missed.

Server databases only: SQLite's clock is the worker process's own, so a
jump of the machine's clock *is* a jump of that database's clock.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter, defaultdict
from datetime import timedelta
from pathlib import Path

import pytest
from django.db.models import F

from django_leasejobs import RunStatus, run_due_jobs, start
from django_leasejobs.clock import DbNow, get_clock
from django_leasejobs.models import Missed, Run, Schedule
from tests.faults.clock import faked_clock_env
from tests.faults.work import LEASE
from tests.models import Effect
from tests.processes import command_env, end, spawned
from tests.utils import on_a_server_only, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True), on_a_server_only]

WALK, BEATING, CRON = "tests.f678.walk", "tests.f678.beating", "tests.f678.cron"
RUNS, PASSES, STEPS, STEP_SECONDS = 12, 3, 3, 0.05
BEATS, BEAT_SECONDS = 2, 4.0  # longer than the 3 s lease: only the heartbeat keeps it (L10)
HOUR = 3600


def worker(folder: Path, name: str, jobs: list[str], concurrency: int, env: dict[str, str]):
    """A ``rundueJobs --loop`` worker driving *jobs*, its output in *folder*/*name*.*."""
    args = ["--loop", "--interval", "0.2", "--concurrency", str(concurrency), "-v", "0"]
    for job_name in jobs:
        args += ["--job", job_name]
    with open(folder / f"{name}.out", "w") as out, open(folder / f"{name}.err", "w") as err:
        return spawned(
            subprocess.Popen(
                [sys.executable, "-m", "django", "rundueJobs", *args],
                env=command_env(LEASEJOBS_FAULTS_DIR=str(folder / "log"), **env),
                stdout=out,
                stderr=err,
            )
        )


def invocations(folder: Path) -> list[tuple[str, ...]]:
    """Every line the jobs logged: (kind, run id, cursor, attempt, monotonic ns, wall, ..., pid)."""
    lines = []
    for path in (folder / "log").glob("*.log"):
        lines += [(*line.split(), path.stem) for line in path.read_text().splitlines()]
    return lines


def leases_never_end_late() -> int:
    """Every lease held now ends at most one lease (plus a second) after the database's now.

    Read in one statement on the database's clock; returns how many leases it saw.
    """
    held = Run.objects.filter(job__in=[WALK, BEATING], lease_owner__isnull=False)
    ahead = held.annotate(ahead=F("next_attempt_at") - DbNow()).values_list("ahead", flat=True)
    seen = list(ahead)
    late = [left for left in seen if left > LEASE + timedelta(seconds=1)]
    assert late == [], f"leases set to end later than one lease from now: {late}"
    return len(seen)


@pytest.mark.parametrize("concurrency", [1, 4])
@pytest.mark.parametrize("jump", ["+1h", "-1h"])
def test_f6_a_wall_clock_jump_changes_nothing_the_database_decides(tmp_path, jump, concurrency):
    (tmp_path / "log").mkdir()
    offset = tmp_path / "offset"
    offset.write_text("+0\n")

    walk = {"passes": PASSES, "steps": STEPS, "step_seconds": STEP_SECONDS}
    runs = [start(WALK, walk, instance=f"f6-{n}").run.pk for n in range(RUNS)]
    run_due_jobs(jobs=[CRON])  # S1: the schedule's row, due at the next minute
    # Parked a day ahead until the jump: else its next minute could come before the
    # due time set below, and fire (rightly) before it.
    Schedule.objects.filter(job=CRON).update(next_due_at=get_clock().now() + timedelta(days=1))
    faked = faked_clock_env(offset)
    jumping = worker(tmp_path, "jumping", [WALK, BEATING, CRON], concurrency, faked)
    honest = worker(tmp_path, "honest", [WALK], concurrency, {})
    steps_in_all = RUNS * PASSES * STEPS
    wait_for(
        lambda: Effect.objects.filter(run_id__in=runs).count() >= steps_in_all // 3,
        "a third of the steps",
        worker=jumping,
    )

    offset.write_text(f"{jump}\n")  # the jump, mid-drive
    jumped_at = get_clock().now()
    beats = [start(BEATING, {"sleep": BEAT_SECONDS}, instance=f"f6-b{n}").run.pk for n in range(2)]
    # A due time a few seconds ahead, off the cron grid (D6: it fires once, then the grid).
    due = jumped_at.replace(microsecond=0) + timedelta(seconds=4)
    Schedule.objects.filter(job=CRON).update(next_due_at=due)

    everything = [*runs, *beats]
    leases_seen = 0

    def finished() -> bool:
        nonlocal leases_seen
        leases_seen += leases_never_end_late()
        fired = Run.objects.filter(job=CRON, status=RunStatus.DONE).exists()
        left = Run.objects.filter(pk__in=everything).exclude(status=RunStatus.DONE).exists()
        return fired and not left

    wait_for(finished, "every run done and the due time fired", seconds=120, every=0.1)
    ended = get_clock().now()
    for name, process in (("jumping", jumping), ("honest", honest)):
        end(process)
        said = (tmp_path / f"{name}.err").read_text()
        assert process.returncode == 0, said
        assert "Traceback" not in said, said
    assert leases_seen > 0

    lines = invocations(tmp_path)
    starts = [line for line in lines if line[0] == "start"]
    # The worker's wall clock really jumped: its passes after the jump saw it an hour off.
    after = [line for line in starts if line[-1] == str(jumping.pid) and line[1] in beats]
    assert len(after) == BEATS
    sign = 1 if jump.startswith("+") else -1
    real_at_begin = {run.pk: run.started_at.timestamp() for run in Run.objects.filter(pk__in=beats)}
    for line in after:
        off = float(line[5]) - real_at_begin[line[1]]
        assert abs(off - sign * HOUR) < 60, f"the worker's clock is {off:.0f} s off, not {jump}"

    # Every pass invoked exactly once, on its first attempt: no lease ended early (the
    # honest worker would have taken it over), no timeout (R10) or heartbeat (L10)
    # misfired (the pass would have failed and run again).
    walked = Counter((line[1], line[2], line[3]) for line in starts if line[1] in runs)
    assert walked == {(run, str(n), "1"): 1 for run in runs for n in range(PASSES)}
    beaten = Counter((line[1], line[2], line[3]) for line in starts if line[1] in beats)
    assert beaten == {(run, "0", "1"): 1 for run in beats}
    for run in Run.objects.filter(pk__in=runs):
        assert run.decoded_counters().value == {"steps": PASSES * STEPS, "passes": PASSES}
    for run in Run.objects.filter(pk__in=beats):
        assert run.decoded_counters().value == {"passes": 1}
    effects = Counter(Effect.objects.filter(run_id__in=runs).values_list("run_id", "name"))
    assert len(effects) == steps_in_all
    assert set(effects.values()) == {1}
    ends = defaultdict(int)
    for line in lines:
        ends[line[1]] += 1 if line[0] == "end" else 0
    assert all(ends[run] == PASSES for run in runs)

    # S2: the due time fired exactly once, not before it was due, nothing missed; the
    # schedule is back on its grid, at the next minute after the database's now.
    fired = list(Run.objects.filter(job=CRON).order_by("started_at"))
    covered = Counter(moment for run in fired for moment in run.decoded_payload().value["covers"])
    assert covered[due.isoformat().replace("+00:00", "Z")] == 1
    assert set(covered.values()) == {1}
    assert all(run.started_at >= due for run in fired)
    assert not Missed.objects.filter(job=CRON).exists()
    next_due = Schedule.objects.get(job=CRON).next_due_at
    assert ended - timedelta(seconds=60) < next_due <= ended + timedelta(seconds=60)
    assert (next_due.second, next_due.microsecond) == (0, 0)
