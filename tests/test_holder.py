"""L9: holder identity, and early release only when the holder is provably gone."""

from __future__ import annotations

import os
import socket
import subprocess
from datetime import timedelta

import pytest

from django_leasejobs import RunStatus, start, store
from django_leasejobs.holder import Holder, current_holder, is_gone, process_start
from django_leasejobs.leases import ENTRY_MARGIN
from django_leasejobs.models import Run
from tests.processes import spawned

LEASE = timedelta(hours=1)  # far longer than the test: only an early release frees it


@pytest.fixture
def dead_pid():
    """A pid that existed a moment ago and is gone now."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@pytest.fixture
def live_process():
    child = spawned(subprocess.Popen(["sleep", "120"]))
    yield child
    child.kill()
    child.wait()


def holder_for(pid, start=None, host=None):
    me = Holder.parse(current_holder())
    return str(Holder(host or me.host, pid, me.start if start is None else start, me.space))


def test_l9_holder_names_host_pid_start_and_namespace():
    holder = Holder.parse(current_holder())
    assert holder.host == socket.gethostname()
    assert holder.pid == os.getpid()
    assert holder.start == process_start(os.getpid())
    assert holder.space


def test_l9_a_pid_that_no_longer_exists_is_gone(dead_pid):
    assert is_gone(holder_for(dead_pid, start=123))


def test_l9_a_live_pid_with_its_own_start_time_is_not_gone(live_process):
    assert not is_gone(holder_for(live_process.pid, start=process_start(live_process.pid)))


def test_l9_a_live_pid_with_another_start_time_was_reused_so_the_holder_is_gone(live_process):
    real = process_start(live_process.pid)
    assert is_gone(holder_for(live_process.pid, start=real - 1))


def test_l9_another_host_or_namespace_is_never_judged(dead_pid):
    assert not is_gone(holder_for(dead_pid, start=123, host="elsewhere"))
    me = Holder.parse(current_holder())
    assert not is_gone(str(Holder(me.host, dead_pid, 123, "4026531999.deadbeef")))


@pytest.mark.parametrize("text", ["", "junk", "host:12:x:y", "h:1:2", "h:1:2:3:4"])
def test_l9_an_unknown_format_is_uncertain(text):
    assert not is_gone(text)


def test_l9_this_process_is_never_gone():
    assert not is_gone(current_holder())


# -- in the drive ------------------------------------------------------------------


def _leased_by(run, holder, *, began=True):
    assert store.claim(run.pk, "crashed-owner", LEASE, holder, takeover=False)
    if began:
        assert store.begin(run.pk, "crashed-owner", LEASE * ENTRY_MARGIN)


@pytest.mark.django_db
def test_l9_a_drive_takes_over_at_once_from_a_dead_local_holder(define, drive, dead_pid):
    seen = []
    spec = define("t.l9", lambda p: seen.append(p.attempt) or p.done(), lease=LEASE)
    run = start(spec).run
    _leased_by(run, holder_for(dead_pid, start=123))
    report = drive(spec)
    assert seen == [2]  # taken over and charged, long before the hour-long lease ends
    assert report.completed == 1
    assert "released early" in report.warnings[0].text
    assert Run.objects.get(pk=run.pk).status == RunStatus.DONE


@pytest.mark.django_db
def test_l9_a_drive_leaves_a_live_local_holder_alone(define, drive, live_process):
    spec = define("t.l9.alive", lambda p: p.done(), lease=LEASE)
    run = start(spec).run
    holder = holder_for(live_process.pid, start=process_start(live_process.pid))
    _leased_by(run, holder)
    report = drive(spec)
    assert report.attempted == 0
    assert report.warnings == []
    after = Run.objects.get(pk=run.pk)
    assert after.lease_owner == "crashed-owner"
    assert after.lease_holder == holder


@pytest.mark.django_db
def test_l9_a_drive_leaves_another_hosts_holder_alone(define, drive, dead_pid):
    spec = define("t.l9.remote", lambda p: p.done(), lease=LEASE)
    run = start(spec).run
    _leased_by(run, holder_for(dead_pid, start=123, host="worker-7"))
    assert drive(spec).attempted == 0
    assert Run.objects.get(pk=run.pk).lease_owner == "crashed-owner"


@pytest.mark.django_db
def test_l9_early_release_of_a_claim_that_never_began_charges_nothing(define, drive, dead_pid):
    seen = []
    spec = define("t.l9.unbegun", lambda p: seen.append(p.attempt) or p.done(), lease=LEASE)
    run = start(spec).run
    _leased_by(run, holder_for(dead_pid, start=123), began=False)
    drive(spec)
    assert seen == [1]


@pytest.mark.django_db
def test_w4_a_drive_of_other_queues_leaves_a_dead_holders_run_alone(define, drive, dead_pid):
    spec = define("t.l9.queued", lambda p: p.done(), lease=LEASE)
    run = start(spec, queue="other").run
    _leased_by(run, holder_for(dead_pid, start=123))
    assert not drive(spec, queues=["default"]).warnings
    assert Run.objects.get(pk=run.pk).status == RunStatus.RUNNING
    report = drive(spec, queues=["other"])
    assert "released early" in report.warnings[0].text
    assert report.completed == 1
