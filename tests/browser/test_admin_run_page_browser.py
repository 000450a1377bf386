"""The run page and the run list at 1 400 px, in a real browser (SPEC A7, issue 20).

What a new operator found trying the admin in a 1 400 px window, each fixed
and checked the way they saw it: a held run released from its own page
(button, confirmation, confirm), the buttons only for those allowed, the run
list with its id and job columns in view (also scrolled sideways), "next
due" saying why a live run waits, and a 100-item step result folded away.
Run on Django 5.2 (``.venv``) and 6.1 (``.venv61``).
"""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.utils import timezone

from django_leasejobs.models import Run
from django_leasejobs.states import Throttle
from tests.factories import RunFactory, StepFactory

from .conftest import PASSWORD
from .seeds import held_invoice_run, import_in_a_pass, last_nights_run
from .test_admin_confirmations import assert_styled_breadcrumbs

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

RUNS = "/admin/leasejobs/run/"
#: The window the operator had.
WIDTH = 1400

#: Where an element is, as the browser lays it out, and the window's width.
BOX = """
const r = arguments[0].getBoundingClientRect();
return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, width: window.innerWidth};
"""
#: The run list's scroll box: how wide the table is, how much of it shows, where it is.
RESULTS = """
const box = document.querySelector("#changelist-form .results");
return {scroll: box.scrollWidth, client: box.clientWidth, left: box.scrollLeft};
"""
#: A cell's background as the browser paints it, its row's, and the admin's own variables'.
PAINT = """
const cell = arguments[0];
const admin = {};
for (const name of ["--body-bg", "--darkened-bg", "--selected-row"]) {
    const probe = document.createElement("div");
    probe.style.background = "var(" + name + ")";
    document.body.appendChild(probe);
    admin[name] = getComputedStyle(probe).backgroundColor;
    probe.remove();
}
return {
    cell: getComputedStyle(cell).backgroundColor,
    row: getComputedStyle(cell.parentElement).backgroundColor,
    admin: admin,
};
"""


def assert_opaque_as_its_row(admin, cell) -> dict:
    """*cell* is painted as its row, with one of the admin's background variables."""
    paint = admin.driver.execute_script(PAINT, cell)
    assert paint["cell"] == paint["row"], paint
    assert paint["cell"] in paint["admin"].values(), paint
    assert "rgba" not in paint["cell"], paint  # opaque: what scrolls passes under it
    return paint


def change_page(run: Run) -> str:
    return f"{RUNS}{run.pk}/change/"


def a_busy_day() -> list[Run]:
    """Live runs waiting for each reason "next due" tells apart, and some history."""
    now = timezone.now()
    made = [
        last_nights_run(now),
        RunFactory(
            job="tests.walk",
            instance="contacts:us",
            status="failed",
            attempts=5,
            failure_code="handler_failed",
            started_at=now - timedelta(hours=2),
            ended_at=now - timedelta(hours=1),
        ),
        RunFactory(  # retrying: three failed passes, the next in a minute
            job="tests.walk",
            instance="contacts:eu",
            attempts=3,
            failure_code="handler_failed",
            counters='{"imported": 700}',
            progress_total=2000,
            started_at=now - timedelta(minutes=40),
            updated_at=now - timedelta(seconds=20),
            next_attempt_at=now + timedelta(minutes=1),
        ),
        RunFactory(  # start(run_after=...): due in an hour, nothing ran yet
            job="tests.nightly",
            instance="report:2026-12",
            next_attempt_at=now + timedelta(hours=1),
        ),
        RunFactory(
            job="tests.rated",
            instance="api:acme",
            throttled_by=Throttle.RATE,
            started_at=now - timedelta(minutes=2),
            updated_at=now,
            next_attempt_at=now + timedelta(seconds=40),
        ),
        import_in_a_pass(now, "contacts:apac"),  # a worker holds it now
        held_invoice_run(),
    ]
    return made


def box(admin, element) -> dict:
    return admin.driver.execute_script(BOX, element)


def assert_in_view(admin, element, what: str) -> dict:
    where = box(admin, element)
    assert where["left"] >= 0, (what, where)
    assert where["right"] <= where["width"], (what, where)
    return where


def id_and_job_cells(admin, run: Run):
    row = admin.row(run.pk)
    return admin.find("th.field-short_id", within=row), admin.find(
        ".field-what_display", within=row
    )


# -- 1. a held run, released from its own page (A7, A3) --------------------------------------


def test_a7_a_held_run_is_released_from_its_own_page(admin):
    held = held_invoice_run()

    admin.open(change_page(held))
    buttons = [a.text.lower() for a in admin.find_all("#leasejobs-summary a.leasejobs-action")]
    assert buttons == ["cancel", "release: resume", "release: fail"]  # no Retry: it is live
    assert "waiting for an operator" in admin.field("next_due_display")
    admin.screenshot("run-page-held.png")

    admin.submit(admin.find("#leasejobs-summary a.leasejobs-action-release-resume"))
    assert admin.find("#content h1").text == f"Resume held run {held.pk}?"
    assert "runs the interrupted pass again from the same cursor" in admin.text("#content")
    assert_styled_breadcrumbs(admin, "Home", "Lease jobs", "Runs", "Release: resume")
    admin.screenshot("run-page-confirm.png")
    held.refresh_from_db()
    assert held.status == "held"  # the button's GET changed nothing
    admin.submit(admin.find('#content form input[type="submit"]'))

    assert admin.driver.current_url.endswith(change_page(held))
    assert admin.messages("success") == [f"Run {held.pk} resumed: it is running and due now."]
    held.refresh_from_db()
    assert held.status == "running"
    assert held.next_attempt_at is not None
    assert held.next_attempt_at <= timezone.now()  # due: the next drive takes it
    entry = LogEntry.objects.get(object_id=held.pk)
    assert entry.get_change_message() == "Released: resumed"
    assert entry.user.get_username() == "operator"
    assert admin.field("status_display") == "Running"
    assert admin.field("next_due_display") == "due now"
    links = admin.find_all("#leasejobs-summary a.leasejobs-action")
    buttons = [a.get_attribute("href") for a in links]
    assert buttons == [admin.base_url + f"{RUNS}{held.pk}/cancel/"]  # running: only Cancel


# -- 2. no permission, no button; a forged POST is refused (A7, A3) ---------------------------

FORGE = """
const done = arguments[arguments.length - 1];
const token = document.cookie.split("; ").find(c => c.startsWith("csrftoken=")).split("=")[1];
fetch(arguments[0], {method: "POST", credentials: "same-origin", redirect: "manual",
                     headers: {"X-CSRFToken": token}})
    .then(r => done(r.status), () => done(0));
"""


def test_a7_without_release_run_there_is_no_release_button_and_a_post_is_refused(
    admin, django_user_model
):
    held = held_invoice_run()
    clerk = django_user_model.objects.create_user("clerk", password=PASSWORD, is_staff=True)
    clerk.user_permissions.add(*Permission.objects.filter(codename__in=["view_run", "cancel_run"]))
    admin.log_in("clerk")

    admin.open(change_page(held))
    assert admin.field("status_display") == "Held"
    links = admin.find_all("#leasejobs-summary a.leasejobs-action")
    assert [a.get_attribute("href") for a in links] == [admin.base_url + f"{RUNS}{held.pk}/cancel/"]

    admin.open(f"{RUNS}{held.pk}/release-resume/")  # the confirmation, typed in
    assert admin.http_status() == 403
    admin.open(change_page(held))  # a page with the session's CSRF cookie, then a forged POST
    status = admin.driver.execute_async_script(FORGE, f"{RUNS}{held.pk}/release-resume/")
    assert status == 403
    held.refresh_from_db()
    assert held.status == "held"
    assert not LogEntry.objects.filter(object_id=held.pk).exists()


# -- 3. the list at 1 400 px: id and job in view, next due says why (A7, A1) ----------------


def test_a7_the_run_list_fits_1400_px_with_the_id_and_job_columns_in_view(admin):
    runs = a_busy_day()
    assert admin.driver.execute_script("return window.outerWidth") == WIDTH

    admin.open(RUNS)
    admin.screenshot("run-list-next-due.png")
    results = admin.driver.execute_script(RESULTS)
    widths = admin.driver.execute_script(
        "return Array.from(document.querySelectorAll('#result_list thead th'),"
        " th => th.className + ' ' + Math.round(th.getBoundingClientRect().width));"
    )
    assert results["scroll"] <= results["client"], (results, widths)  # no sideways scrolling
    for run in runs:
        for cell in id_and_job_cells(admin, run):
            assert_in_view(admin, cell, run.instance)
    due = dict(zip(admin.column("short_id"), admin.column("next_due_display"), strict=True))
    assert due[runs[2].pk].startswith("retry in ")
    assert due[runs[2].pk].endswith("(after 3 failed passes: handler_failed)")
    assert due[runs[3].pk].startswith("first pass in ")
    clock = r"\d\d:\d\d:\d\d UTC \(in [0-9a-z ]+\)"  # 02:14:05 UTC (in 3 min 59 s)
    assert re.fullmatch(f"waiting for its rate limit, until {clock}", due[runs[4].pk])
    lease = f"running now on worker-2 pid 4182, lease until {clock}"
    assert re.fullmatch(lease, due[runs[5].pk].replace("\n", " "))
    waiting, stopped_in = due[runs[6].pk].splitlines()
    assert waiting == "waiting for an operator (release: resume or fail)"
    assert stopped_in.startswith("step charge:1042 in flight, begun 4 min")  # A8
    statuses = dict(zip(admin.column("short_id"), admin.column("status_display"), strict=True))
    assert statuses[runs[2].pk] == statuses[runs[3].pk] == "Running"  # ... and yet not alike


def test_a7_scrolled_sideways_the_run_list_keeps_the_id_and_job_columns(admin):
    """A narrower window, or a long job name: the table scrolls, id and job stay, opaque."""
    runs = a_busy_day()
    RunFactory(job="tests.walk", instance="tenant:" + "very-long-instance-name-" * 4)
    admin.driver.set_window_size(900, 1000)
    try:
        admin.open(RUNS)
        results = admin.driver.execute_script(RESULTS)
        assert results["scroll"] > results["client"], results  # it must scroll here
        first_id, first_job = id_and_job_cells(admin, runs[0])
        before = box(admin, admin.find(".field-failure_display", within=admin.row(runs[0].pk)))
        admin.driver.execute_script(
            "const b = document.querySelector('#changelist-form .results');"
            "b.scrollLeft = b.scrollWidth;"
        )
        results = admin.driver.execute_script(RESULTS)
        assert results["left"] > 0, results
        after = box(admin, admin.find(".field-failure_display", within=admin.row(runs[0].pk)))
        assert after["left"] < before["left"]  # the other columns did move
        for run in runs:
            id_cell, job_cell = id_and_job_cells(admin, run)
            id_box = assert_in_view(admin, id_cell, run.instance)
            job_box = assert_in_view(admin, job_cell, run.instance)
            assert job_box["left"] >= id_box["right"] - 1  # side by side, not on top
        for run in runs[:2]:  # an odd and an even row
            for cell in id_and_job_cells(admin, run):
                assert_opaque_as_its_row(admin, cell)
        admin.find(f'input[name="_selected_action"][value="{runs[0].pk}"]').click()
        paint = assert_opaque_as_its_row(admin, first_id)  # a selected row
        assert paint["cell"] == paint["admin"]["--selected-row"], paint
        admin.driver.execute_cdp_cmd(
            "Emulation.setEmulatedMedia",
            {"features": [{"name": "prefers-color-scheme", "value": "dark"}]},
        )
        for cell in (first_job, *id_and_job_cells(admin, runs[1])):
            paint = assert_opaque_as_its_row(admin, cell)
            assert paint["cell"] not in ("rgb(255, 255, 255)", "rgb(248, 248, 248)"), paint
    finally:
        admin.driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
        admin.driver.set_window_size(WIDTH, 1000)


# -- 4. a long step result is folded (A7, A2) ---------------------------------------------------


def test_a7_a_100_item_step_result_is_folded_and_the_page_stays_short(admin):
    run = RunFactory(job="tests.walk", instance="contacts:eu", cursor='{"page": 3}')
    items = [{"id": n, "email": f"contact-{n}@example.com", "tags": ["eu"]} for n in range(100)]
    StepFactory(run=run, name="fetch:3", result=json.dumps(items))
    StepFactory(run=run, name="save:3", result='{"saved": 100}')

    admin.open(change_page(run))
    folded = admin.find_all(".field-result_display details.leasejobs-fold")
    assert len(folded) == 1
    assert folded[0].get_attribute("open") is None  # closed until asked
    summary = admin.text("summary", within=folded[0])
    assert summary.startswith("list of 100 items, ")
    assert summary.endswith("KB — show")
    height = admin.driver.execute_script("return document.documentElement.scrollHeight")
    assert height < 3000, height
    admin.screenshot("run-page-folded.png", scroll_to=".inline-group")
    short = admin.find_all(".field-result_display pre")
    assert [p.text for p in short if p.is_displayed()] == ['{\n  "saved": 100\n}']

    admin.find("summary", within=folded[0]).click()
    assert folded[0].get_attribute("open") is not None
    shown = admin.text("pre", within=folded[0])
    assert json.loads(shown) == items
    opened = admin.driver.execute_script("return document.documentElement.scrollHeight")
    assert opened > height + 3000  # what it had folded away
