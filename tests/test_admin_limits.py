"""Flow control in the operators' admin (SPEC C5): which limit a throttled run waits for."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_leasejobs.states import Throttle
from tests.factories import RunFactory

pytestmark = pytest.mark.django_db

RUNS = "/admin/leasejobs/run/"


def test_c5_the_list_marks_a_run_waiting_for_a_concurrency_slot(admin_client):
    RunFactory(job="tests.limited", throttled_by=Throttle.CONCURRENCY)
    content = admin_client.get(RUNS).content.decode()
    assert "waiting for a free slot of its concurrency limit" in content


def test_c5_a_run_waiting_for_its_rate_says_until_when(admin_client):
    until = timezone.now() + timedelta(seconds=40)
    run = RunFactory(job="tests.rated", throttled_by=Throttle.RATE, next_attempt_at=until)
    content = admin_client.get(f"{RUNS}{run.pk}/change/").content.decode()
    assert "waiting for its rate limit, until" in content
    assert "5 per 2 s" in content  # the job's limit, as this process registers it


def test_a8_c5_a_throttled_run_a_drive_claims_again_reads_as_waiting_never_as_claimed(
    admin_client,
):
    """A drive claims a throttled run again to ask its limit (C2): that claim is no pass."""
    soon = timezone.now() + timedelta(seconds=30)
    run = RunFactory(
        job="tests.limited",
        throttled_by=Throttle.CONCURRENCY,
        lease_owner="x" * 26,
        lease_holder="vm:21870:1700000000",
        next_attempt_at=soon,  # the claim's expiry, not the limit's
    )
    for url in (RUNS, f"{RUNS}{run.pk}/change/"):
        content = admin_client.get(url).content.decode()
        assert "waiting for a free slot of its concurrency limit" in content, url
        assert "claimed" not in content, url
        assert "vm pid 21870" not in content, url


def test_a8_c5_once_its_pass_has_begun_a_run_reads_as_running_not_waiting(admin_client):
    RunFactory(
        job="tests.limited",
        lease_owner="x" * 26,
        lease_holder="vm:21870:1700000000",
        lease_began_at=timezone.now(),  # BEGIN cleared throttled_by: a slot was free
        next_attempt_at=timezone.now() + timedelta(minutes=5),
    )
    content = admin_client.get(RUNS).content.decode()
    assert "running now on vm pid 21870" in content
    assert "waiting for" not in content


def test_c5_the_detail_names_the_key_a_run_counts_under(admin_client):
    run = RunFactory(job="tests.limited.keyed", limit_key="acme")
    content = admin_client.get(f"{RUNS}{run.pk}/change/").content.decode()
    assert "2 at once, per key (this run: acme)" in content
