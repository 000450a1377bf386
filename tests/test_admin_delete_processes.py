"""A7 with a real worker: a run whose pass is in flight in another process is not deleted.

The bug this guards against: a superuser deleted a run while a worker's pass of
it was running; the pass ran on, a ``start()`` of the same (job, instance)
made a fresh run, and a second drive completed that one while the first pass
was still running -- two passes of one (job, instance) at once (R1, L1).

Here a child process drives ``tests.sleepy`` (its pass records "started", then
sleeps); while the pass sleeps, the admin's Delete (the change page's and the
list's "Delete selected runs") is refused, and a ``start()`` of the same (job,
instance) joins the live run instead of making a second one.
"""

from __future__ import annotations

import pytest

from django_leasejobs import RunStatus, start
from django_leasejobs.models import Run
from tests.models import Effect
from tests.processes import django_command
from tests.utils import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.concurrency]

RUNS = "/admin/leasejobs/run/"
JOB = "tests.sleepy"
WAIT = 60  # seconds: only bounds a hang


def in_flight(instance: str, gate):
    """Start a run of ``tests.sleepy`` and a worker driving it; return both once the pass began.

    The pass lasts until the test creates the file *gate* (``finish``), however
    long the admin requests take on a busy machine (WAIT at most).
    """
    run = start(JOB, {"seconds": WAIT, "until_file": str(gate)}, instance=instance).run
    worker = django_command("rundueJobs", "--job", JOB)
    started = Effect.objects.filter(run_id=run.pk, name="started")
    wait_for(started.exists, "the worker to begin the pass", worker=worker)
    return run, worker


def finish(worker, gate) -> str:
    gate.touch()  # the pass in flight may end now
    try:
        out, err = worker.communicate(timeout=WAIT)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 0, err
    return str(out)


def delete_both_ways(client, run) -> list[str]:
    """Delete *run* by its change page's delete view and by "Delete selected runs"; the messages."""
    page = client.post(f"{RUNS}{run.pk}/delete/", {"post": "yes"}, follow=True)
    data = {"action": "delete_selected", "_selected_action": [run.pk], "post": "yes"}
    bulk = client.post(RUNS, data, follow=True)
    return [str(m) for response in (page, bulk) for m in response.context["messages"]]


def runs_of(instance: str) -> list[Run]:
    return list(Run.objects.filter(job=JOB, instance=instance).order_by("id"))


def test_a7_a_run_whose_pass_runs_in_a_worker_is_not_deleted_and_a_start_joins_it(
    admin_client, tmp_path
):
    gate = tmp_path / "gate"
    run, worker = in_flight("a7-live", gate)
    try:
        page = admin_client.get(f"{RUNS}{run.pk}/change/").content.decode()
        assert f"{RUNS}{run.pk}/delete/" not in page  # no Delete button for it
        said = delete_both_ways(admin_client, run)
        assert any(f"Run {run.pk} is live, so it was not deleted" in m for m in said), said
        assert any("1 run is live and was not deleted" in m for m in said), said
        joined = start(JOB, {"seconds": 0}, instance="a7-live")
        assert joined.joined
        assert joined.run.pk == run.pk
        assert [r.pk for r in runs_of("a7-live")] == [run.pk]  # no second run beside the pass
        # All of the above happened while the worker's pass was in flight.
        during = Run.objects.get(pk=run.pk)
        assert worker.poll() is None
        assert during.status == RunStatus.RUNNING
        assert during.lease_began_at is not None
    finally:
        out = finish(worker, gate)
    assert "completed=1" in out
    [done] = runs_of("a7-live")
    assert done.status == RunStatus.DONE
    assert Effect.objects.filter(run_id=run.pk, name="started").count() == 1
    # Finished now: it deletes freely.
    said = delete_both_ways(admin_client, done)
    assert any("was deleted successfully" in m for m in said), said
    assert runs_of("a7-live") == []


def test_a7_a_run_cancelled_while_its_pass_runs_in_a_worker_is_not_deleted_until_it_stopped(
    admin_client, tmp_path
):
    gate = tmp_path / "gate"
    run, worker = in_flight("a7-cancelled", gate)
    try:
        data = {"action": "cancel_runs", "_selected_action": [run.pk]}
        assert admin_client.post(RUNS, data).status_code == 302
        cancelled = Run.objects.get(pk=run.pk)
        assert cancelled.status == RunStatus.CANCELLED
        assert cancelled.live_key is not None  # kept while the pass may be in flight (§3)
        said = delete_both_ways(admin_client, run)
        assert any(f"Run {run.pk} was cancelled, but its pass may still be" in m for m in said)
        assert any("1 cancelled run was not deleted" in m for m in said), said
        joined = start(JOB, {"seconds": 0}, instance="a7-cancelled")
        assert joined.joined
        assert joined.run.pk == run.pk
        assert [r.pk for r in runs_of("a7-cancelled")] == [run.pk]
        # All of the above happened while the worker's pass was in flight.
        assert worker.poll() is None
        assert Run.objects.get(pk=run.pk).live_key is not None
    finally:
        out = finish(worker, gate)
    assert "superseded=1" in out  # the pass found its commit refused, and stopped
    stopped = Run.objects.get(pk=run.pk)
    assert (stopped.status, stopped.live_key) == (RunStatus.CANCELLED, None)
    # Its pass has stopped: it deletes freely, and the start's follow-up is the one live run.
    said = delete_both_ways(admin_client, stopped)
    assert any("was deleted successfully" in m for m in said), said
    [follow_up] = runs_of("a7-cancelled")
    assert follow_up.origin == "follow_up"
