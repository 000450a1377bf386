"""Times on the admin's pages (SPEC A8): one format, one named zone, the database's clock.

The web server's clock and the database's are put a day apart through the
clock seam (L1); what the admin says of a lease -- held, expired, claimed --
and every "12 min ago" follows the database's.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import override_settings

from django_leasejobs.states import RunStatus
from tests.factories import MissedFactory, RunFactory, StepFactory

pytestmark = pytest.mark.django_db

RUNS = "/admin/leasejobs/run/"
OWNER = "01JQ0LEASEOWNER00000000000"


def leased(expiry: datetime, **columns):
    """A run a worker holds, its pass begun, its lease until *expiry*."""
    return RunFactory(
        lease_owner=OWNER,
        lease_holder="worker-2:4182:1700000000",
        lease_began_at=expiry - timedelta(minutes=5),
        next_attempt_at=expiry,
        **columns,
    )


def test_a8_a_lease_the_web_servers_clock_calls_expired_is_held_by_the_databases(
    admin_client, frozen_clock
):
    web_now = datetime.now(UTC)
    frozen_clock.set(web_now - timedelta(days=1))  # the database is a day behind this server
    run = leased(web_now - timedelta(minutes=1))
    listed = admin_client.get(RUNS).content.decode()
    assert "running now on worker-2 pid 4182" in listed
    assert "leasejobs-due-lease_expired" not in listed
    detail = admin_client.get(f"{RUNS}{run.pk}/change/").content.decode()
    assert "worker-2 pid 4182, a pass in flight, until" in detail
    assert "expired" not in detail


def test_a8_a_lease_the_web_servers_clock_calls_held_is_expired_by_the_databases(
    admin_client, frozen_clock
):
    web_now = datetime.now(UTC)
    frozen_clock.set(web_now + timedelta(days=1))  # the database is a day ahead
    run = leased(web_now + timedelta(hours=1))
    listed = admin_client.get(RUNS).content.decode()
    assert "due now: the lease of worker-2 pid 4182 expired" in listed
    assert "running now" not in listed
    detail = admin_client.get(f"{RUNS}{run.pk}/change/").content.decode()
    assert "worker-2 pid 4182, expired at" in detail
    assert "23 h ago" in detail  # how long ago, by the database's clock


def test_a8_relative_times_and_durations_so_far_count_from_the_databases_now(
    admin_client, frozen_clock
):
    frozen_clock.set(datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    run = RunFactory(started_at=datetime(2026, 3, 1, 10, 55, tzinfo=UTC))
    listed = admin_client.get(RUNS).content.decode()
    assert ">1 h 5 min ago</time>" in listed
    detail = admin_client.get(f"{RUNS}{run.pk}/change/").content.decode()
    assert "1 h 5 min so far" in detail
    assert "2026-03-01 10:55:00 UTC</time> (1 h 5 min ago)" in detail


@override_settings(TIME_ZONE="Europe/Paris")
def test_a8_every_time_on_the_run_page_is_in_one_format_in_the_named_zone(
    admin_client, frozen_clock
):
    frozen_clock.set(datetime(2026, 12, 3, 16, 57, tzinfo=UTC))
    start = datetime(2026, 12, 3, 16, 53, 12, tzinfo=UTC)
    run = leased(datetime(2026, 12, 3, 16, 58, 21, tzinfo=UTC), started_at=start, updated_at=start)
    StepFactory(run=run, name="charge:102", recorded_at=start + timedelta(seconds=30))
    detail = admin_client.get(f"{RUNS}{run.pk}/change/").content.decode()
    for shown in (
        "2026-12-03 17:53:12 Europe/Paris",  # started, updated
        "2026-12-03 17:53:42 Europe/Paris",  # the step recorded
        "2026-12-03 17:53:21 Europe/Paris",  # the lease began
        "lease until <time",
        "17:58:21 Europe/Paris",  # "until": the same day, its date left out
        "(in 1 min 21 s)",
    ):
        assert shown in detail, shown
    for django_format in ("p.m.", "Dec. 3", "0:00:"):
        assert django_format not in detail, django_format


def test_a8_rerun_requested_no_is_a_dash_not_an_error_icon(admin_client):
    kicked = RunFactory(rerun_requested=True)
    plain = RunFactory()
    shown = admin_client.get(f"{RUNS}{kicked.pk}/change/").content.decode()
    assert "yes: one more run starts with the latest payload" in shown
    quiet = admin_client.get(f"{RUNS}{plain.pk}/change/").content.decode()
    assert "icon-no.svg" not in quiet
    field = quiet[quiet.index('class="form-row field-rerun_display') :]
    assert '<div class="readonly">—</div>' in field[: field.index("</div>\n") + 200]


def test_a8_the_progress_track_takes_the_admins_colours_from_the_stylesheet(admin_client):
    run = RunFactory(counters='{"sent": 41}', progress_total=100)
    shown = admin_client.get(f"{RUNS}{run.pk}/change/").content.decode()
    assert '<div class="leasejobs-progress" title="41 / 100">' in shown
    assert 'class="leasejobs-progress-done" style="width:41%"' in shown
    assert "background" not in shown[shown.index("leasejobs-progress") :][:200]


def test_a8_the_missed_ledger_and_paused_queues_write_times_one_way(admin_client):
    from django_leasejobs import pause_queue

    MissedFactory(due_at=datetime(2026, 3, 1, 3, 0, tzinfo=UTC))
    listed = admin_client.get("/admin/leasejobs/missed/").content.decode()
    assert "2026-03-01 03:00:00 UTC" in listed
    pause_queue("mail", by="alice")
    paused = admin_client.get("/admin/leasejobs/pausedqueue/").content.decode()
    assert " UTC</time>" in paused
    assert "p.m." not in paused
    assert "a.m." not in paused


def test_a8_a_held_run_has_no_lease_to_show(admin_client):
    run = RunFactory(status=RunStatus.HELD, failure_code="interrupted", next_attempt_at=None)
    detail = admin_client.get(f"{RUNS}{run.pk}/change/").content.decode()
    field = detail[detail.index("field-lease_display") :]
    assert '<div class="readonly">—</div>' in field[:400]
