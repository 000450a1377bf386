"""The read-only admin pages open (the operators' admin proper is SPEC §8)."""

from __future__ import annotations

import pytest

from django_leasejobs import start
from tests.factories import RunFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("model", ["run", "schedule", "missed"])
def test_admin_changelists_open(admin_client, drive, model):
    drive()  # creates the schedule rows
    start("tests.walk")
    response = admin_client.get(f"/admin/leasejobs/{model}/")
    assert response.status_code == 200


def test_a_malformed_run_opens_in_the_admin(admin_client):
    run = RunFactory(payload="{broken", cursor="[1,")
    response = admin_client.get(f"/admin/leasejobs/run/{run.pk}/change/")
    assert response.status_code == 200
    assert b"{broken" in response.content


def test_nothing_can_be_added_by_hand(admin_client):
    assert admin_client.get("/admin/leasejobs/run/add/").status_code == 403
    assert admin_client.get("/admin/leasejobs/schedule/add/").status_code == 403
