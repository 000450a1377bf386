"""The admin's confirmation pages in a real browser: styled breadcrumbs, and A7's refusals.

Django 6.1 moved the admin's breadcrumbs from ``<div class="breadcrumbs">`` to
``<ol class="breadcrumbs">``, and its CSS names the element, so a page written
for one version shows a bare row of links on the other. Each page this app
adds (the schedules' pause confirmation, a run it cannot read) and each
confirmation its run pages lead to (Django's delete pages) is checked the way
an operator sees it: the breadcrumbs bar has the admin's colour and padding.
Run on Django 5.2 (``.venv``) and 6.1 (``.venv61``, tox ``py312-django61-sqlite``).
"""

from __future__ import annotations

import django
import pytest
from django.db import connection

from django_leasejobs import run_due_jobs
from django_leasejobs.models import Run, Schedule
from tests.factories import RunFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

RUNS = "/admin/leasejobs/run/"
SCHEDULES = "/admin/leasejobs/schedule/"
#: The element the running admin's CSS styles as breadcrumbs.
TAG = "ol" if django.VERSION >= (6, 1) else "div"
#: What stands between two crumbs of a ``div.breadcrumbs`` (``&rsaquo;``).
SEPARATOR = "\N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK}"

#: The bar's colour as the admin's own CSS computes it (a probe painted with its variable),
#: and the bar's styles as the browser computes them.
STYLES = """
const bar = arguments[0];
const probe = document.createElement("div");
probe.style.background = "var(--breadcrumbs-bg)";
document.body.appendChild(probe);
const admin = getComputedStyle(probe).backgroundColor;
probe.remove();
const style = getComputedStyle(bar);
return {
    admin: admin,
    background: style.backgroundColor,
    paddingLeft: style.paddingLeft,
    items: Array.from(bar.querySelectorAll("li"), li => getComputedStyle(li).display),
};
"""


def assert_styled_breadcrumbs(admin, *crumbs: str) -> None:
    """The page's breadcrumbs: the admin's bar, in the running Django's markup, reading *crumbs*."""
    bars = admin.find_all('nav[aria-label="Breadcrumbs"] > .breadcrumbs')
    assert len(bars) == 1, admin.driver.page_source
    bar = bars[0]
    assert bar.tag_name == TAG
    assert bar.is_displayed()
    style = admin.driver.execute_script(STYLES, bar)
    assert style["admin"] not in ("", "rgba(0, 0, 0, 0)"), style  # the admin's CSS is loaded
    assert style["background"] == style["admin"], style  # ... and styles this bar
    assert style["paddingLeft"] == "40px", style
    if TAG == "ol":  # inline items: one row, no numbers; the separators are the CSS's
        assert style["items"] == ["inline-block"] * len(crumbs), style
        assert [item.text for item in admin.find_all("li", within=bar)] == list(crumbs)
        assert admin.find_all('li[aria-current="page"]', within=bar)[-1].text == crumbs[-1]
    else:
        assert [part.strip() for part in bar.text.split(SEPARATOR)] == list(crumbs)


def test_a5_the_pause_confirmation_has_the_admins_breadcrumbs(admin, define):
    define("t.browser.crumbs", lambda p: p.done(), schedule="0 3 * * *", timezone="UTC")
    run_due_jobs(jobs=["t.browser.crumbs"])
    row = Schedule.objects.get(job="t.browser.crumbs")

    admin.open(SCHEDULES)
    admin.act("Pause selected schedules…", row.pk)
    assert admin.find("#id_note").is_displayed()  # the confirmation, asking for the note
    assert_styled_breadcrumbs(admin, "Home", "Lease jobs", "Schedules", "Pause")
    admin.submit(admin.find_all(".breadcrumbs a")[-1])  # the crumb back to the list
    assert admin.driver.current_url.endswith(SCHEDULES)


#: Per backend, a way to store a run's start time that the backend cannot read back.
UNREADABLE_START = {
    "sqlite": "UPDATE leasejobs_run SET started_at = '2026-02-30 10:00:00' WHERE id = %s",
    "postgresql": "UPDATE leasejobs_run SET started_at = started_at + interval '8000 years' "
    "WHERE id = %s",
}


def test_a2_the_page_of_a_run_it_cannot_read_has_the_admins_breadcrumbs(admin):
    if connection.vendor not in UNREADABLE_START:
        pytest.fail(f"no unreadable row known for {connection.vendor}: add one", pytrace=False)
    run = RunFactory(instance="restored")
    with connection.cursor() as cursor:
        cursor.execute(UNREADABLE_START[connection.vendor], [run.pk])

    admin.open(f"{RUNS}{run.pk}/change/")
    assert "cannot give this run back as a whole" in admin.text(".errornote")
    assert_styled_breadcrumbs(admin, "Home", "Lease jobs", "Runs", run.pk)


def test_a7_the_run_delete_confirmations_have_the_admins_breadcrumbs(admin):
    finished = RunFactory(status="done", instance="old-import")
    other = RunFactory(status="failed", instance="older-import")

    admin.open(f"{RUNS}{finished.pk}/change/")
    admin.submit(admin.find("a.deletelink"))
    assert_styled_breadcrumbs(admin, "Home", "Lease jobs", "Runs", str(finished), "Delete")
    admin.submit(admin.find('#content form [type="submit"]'))
    assert any("was deleted successfully" in m for m in admin.messages("success"))
    assert not Run.objects.filter(pk=finished.pk).exists()

    admin.open(RUNS)
    admin.act("Delete selected runs", other.pk)
    assert_styled_breadcrumbs(admin, "Home", "Lease jobs", "Runs", "Delete multiple objects")
    admin.submit(admin.find('#content form [type="submit"]'))
    assert admin.messages("success") == ["Successfully deleted 1 run."]
    assert not Run.objects.filter(pk=other.pk).exists()


def test_a7_a_live_run_offers_no_delete_and_its_delete_points_to_cancel(admin):
    live = RunFactory(instance="contacts:eu")
    finished = RunFactory(status="done", instance="contacts:us")

    admin.open(f"{RUNS}{live.pk}/change/")
    assert admin.find_all("a.deletelink") == []
    admin.open(f"{RUNS}{live.pk}/delete/")  # a bookmark, or a page loaded before it went live
    assert admin.driver.current_url.endswith(f"{RUNS}{live.pk}/change/")
    [warning] = admin.messages("warning")
    assert f"Run {live.pk} is live, so it was not deleted" in warning
    assert "Cancel it first" in warning

    admin.open(RUNS)
    admin.act("Delete selected runs", live.pk, finished.pk)
    assert admin.messages("warning") == [
        "1 run is live and was not deleted: a pass of it may be running. Cancel it first "
        "(Cancel selected runs); once it has finished it can be deleted."
    ]
    listed = admin.text("#content")
    assert str(finished) in listed  # the confirmation promises the finished run only
    assert str(live) not in listed
    admin.submit(admin.find('#content form [type="submit"]'))
    assert admin.messages("success") == ["Successfully deleted 1 run."]
    assert Run.objects.filter(pk=live.pk).exists()
    assert not Run.objects.filter(pk=finished.pk).exists()
