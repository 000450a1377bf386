"""What an operator needs first (SPEC A8), in a real browser: 1 400 x 1 000, a phone's 390 px,
light and dark. Run on Django 5.2 (``.venv``) and 6.1 (``.venv61``).

* a held run names the step its pass stopped in, and when it began: on its page (banner and
  summary), in the held list, on the "Release: resume" confirmation -- at 1 400 px and 390 px;
* a failed run's failure, and who cancelled a cancelled run, are on the first screen
  (above y = 1 000) on both Django versions;
* at 390 px the run list shows each run's status, the overview's queue actions are whole and
  its chart labels are at least 10 px;
* in dark mode the progress bar's empty track is not white.

With ``LEASEJOBS_SCREENSHOTS=1`` it writes, for the running Django, the held run, a failed
run, the run list and the overview at both widths in both themes to
``docs/_static/screenshots/a8/`` (``<page>-<width>-<theme>-django<version>.png``).
"""

from __future__ import annotations

from contextlib import contextmanager
from datetime import timedelta

import django
import pytest
from django.utils import timezone

from django_leasejobs import pause_queue
from django_leasejobs.models import Run
from tests.factories import RunFactory

from .seeds import (
    cancelled_cleanup,
    failed_import,
    held_invoice_run,
    import_in_a_pass,
    last_nights_run,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

RUNS = "/admin/leasejobs/run/"
OVERVIEW = "/admin/leasejobs/pausedqueue/overview/"
WIDE, TALL = 1400, 1000  # the session's window (tests/browser/conftest.py)
PHONE, PHONE_TALL = 390, 844
#: The first screen, as A8 says it: what is above this line needs no scrolling.
FOLD = 1000
VERSION = f"django{django.VERSION[0]}{django.VERSION[1]}"

#: Where an element is, and the window's size.
BOX = """
const r = arguments[0].getBoundingClientRect();
return {left: r.left, right: r.right, top: r.top, bottom: r.bottom,
        width: window.innerWidth, height: window.innerHeight};
"""


def change_page(run: Run) -> str:
    return f"{RUNS}{run.pk}/change/"


def box(admin, element) -> dict:
    return admin.driver.execute_script(BOX, element)


def assert_whole_in_view(admin, element, what: str) -> dict:
    """*element* is inside the window across, and not cut by a box that scrolls or clips."""
    where = box(admin, element)
    assert where["left"] >= 0, (what, where)
    assert where["right"] <= where["width"], (what, where)
    clipped = admin.driver.execute_script(
        """
        const el = arguments[0], r = el.getBoundingClientRect();
        for (let p = el.parentElement; p; p = p.parentElement) {
            const s = getComputedStyle(p);
            if (s.overflowX === "visible" && s.overflowY === "visible") continue;
            const b = p.getBoundingClientRect();
            if (r.left < b.left - 0.5 || r.right > b.right + 0.5) return p.tagName;
        }
        return el.scrollWidth > el.clientWidth + 1 ? "its own text" : null;
        """,
        element,
    )
    assert clipped is None, (what, clipped, where)
    return where


@contextmanager
def window(admin, width: int, height: int, *, dark: bool = False):
    """The browser at *width* x *height*, in the dark colour scheme if asked; put back after."""
    driver = admin.driver
    try:
        driver.set_window_size(width, height)
        features = [{"name": "prefers-color-scheme", "value": "dark" if dark else "light"}]
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": features})
        yield driver
    finally:
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
        driver.set_window_size(WIDE, TALL)


#: The four shapes every page is looked at in (A8): the operator's window and a phone, each
#: in the admin's light and dark themes.
SHAPES = [
    (WIDE, TALL, False, "1400-light"),
    (WIDE, TALL, True, "1400-dark"),
    (PHONE, PHONE_TALL, False, "390-light"),
    (PHONE, PHONE_TALL, True, "390-dark"),
]


def shoot(admin, path: str, page: str, scroll_to: str | None = None) -> None:
    """Open *path* in each of :data:`SHAPES` and save a screenshot of it as *page*."""
    for width, height, dark, shape in SHAPES:
        with window(admin, width, height, dark=dark):
            admin.open(path)
            admin.screenshot(f"a8/{page}-{shape}-{VERSION}.png", scroll_to=scroll_to)


def a_day_of_runs(now) -> dict[str, Run]:
    """Runs of each kind an operator meets, newest last (so first in the list)."""
    return {
        "done": last_nights_run(now),
        "cancelled": cancelled_cleanup(now),
        "failed": failed_import(now),
        "rated": RunFactory(
            job="tests.rated",
            instance="api:acme",
            throttled_by="rate",
            started_at=now - timedelta(minutes=2),
            updated_at=now,
            next_attempt_at=now + timedelta(seconds=40),
        ),
        "leased": import_in_a_pass(now, "contacts:apac"),
        "held": held_invoice_run(now),
    }


# -- 1. a held run names its step in flight (A8) ---------------------------------------------


@pytest.mark.parametrize(("width", "height"), [(WIDE, TALL), (PHONE, PHONE_TALL)])
def test_a8_a_held_run_names_its_step_in_flight_on_its_page_the_list_and_the_release(
    admin, width, height
):
    held = held_invoice_run()
    with window(admin, width, height):
        admin.open(change_page(held))
        banner = admin.find("#leasejobs-held-banner")
        assert "charge:1042" in banner.text
        assert "was in flight; the step began " in banner.text
        assert "4 min ago" in banner.text
        where = assert_whole_in_view(admin, banner, "the held banner")
        assert where["top"] < where["height"], where  # on the first screen
        in_flight = admin.find("#leasejobs-summary .leasejobs-summary-in-flight dd")
        assert in_flight.text.startswith("step charge:1042, begun ")
        assert_whole_in_view(admin, in_flight, "the summary's step in flight")
        resume = admin.find("#leasejobs-summary a.leasejobs-action-release-resume")
        if width == WIDE:  # the first screen holds the decision too (on a phone, a scroll away)
            assert box(admin, resume)["bottom"] <= box(admin, resume)["height"]

        admin.submit(resume)
        said = admin.find("#leasejobs-in-flight")
        assert said.text.startswith("Step charge:1042 runs again: it was in flight")
        assert_whole_in_view(admin, said, "the confirmation's step")

        admin.open(f"{RUNS}?held=yes")
        due = admin.find(".field-next_due_display", within=admin.row(held.pk))
        assert due.text.splitlines()[-1].startswith("step charge:1042 in flight, begun 4 min ")
        status = admin.find(".field-status_display", within=admin.row(held.pk))
        assert status.text == "Held"
        assert_whole_in_view(admin, status, "the held run's status")


def test_a8_a_held_run_whose_pass_stopped_before_any_step_says_so(admin):
    held = RunFactory(job="tests.fragile", status="held", failure_code="interrupted")
    admin.open(change_page(held))
    assert "no step had begun when the pass stopped" in admin.text("#leasejobs-held-banner")
    assert "No step recorded" in admin.text("#leasejobs-no-steps")


# -- 2. the first screen: a failed run's failure, who cancelled (A8) -------------------------


def test_a8_a_failed_runs_failure_and_its_actions_are_on_the_first_screen(admin):
    failed = failed_import()
    admin.open(change_page(failed))
    assert admin.driver.execute_script("return window.innerWidth") == WIDE
    failure = admin.find("#leasejobs-summary .leasejobs-summary-failure")
    assert "handler_failed" in failure.text
    assert "The job's handler raised an exception" in failure.text
    error = admin.find("#leasejobs-summary .leasejobs-summary-error")
    assert error.text.endswith("ConnectionError: crm.example.com answered 503 Service Unavailable")
    retry = admin.find("#leasejobs-summary a.leasejobs-action-retry")
    for element, what in ((failure, "failure"), (error, "last error"), (retry, "Retry")):
        where = box(admin, element)
        assert where["top"] < FOLD, (VERSION, what, where)
        assert where["bottom"] <= where["height"], (VERSION, what, where)  # in the window


def test_a8_who_cancelled_a_cancelled_run_is_on_the_first_screen(admin):
    run = RunFactory(job="tests.walk", instance="contacts:eu")
    from django_leasejobs import cancel

    assert cancel(run.pk, by="alice")
    admin.open(change_page(run))
    error = admin.find("#leasejobs-summary .leasejobs-summary-error")
    assert error.text.endswith("cancelled by alice")
    where = box(admin, error)
    assert where["top"] < FOLD, (VERSION, where)
    assert where["bottom"] <= where["height"], (VERSION, where)


# -- 3. a phone's 390 px (A8) ----------------------------------------------------------------


def test_a8_at_390_px_the_run_list_shows_each_runs_status(admin):
    runs = a_day_of_runs(timezone.now())
    with window(admin, PHONE, PHONE_TALL) as driver:
        admin.open(RUNS)
        assert driver.execute_script("return window.innerWidth") == PHONE
        for key, run in runs.items():
            cell = admin.find(".field-status_display", within=admin.row(run.pk))
            assert cell.text, key
            assert_whole_in_view(admin, cell, key)


def test_a8_at_390_px_the_overviews_queue_actions_are_whole_and_chart_labels_readable(admin):
    now = timezone.now()
    for n in range(3):
        RunFactory(job="mail.digest", queue="mail", next_attempt_at=now - timedelta(minutes=n))
    RunFactory(job="reports.daily", queue="reports", next_attempt_at=now + timedelta(hours=1))
    pause_queue("mail", by="alice", note="SMTP relay down, back at 14:00 (ticket OPS-812)")
    from .test_admin_overview_browser import statistics

    statistics()
    with window(admin, PHONE, PHONE_TALL) as driver:
        admin.open(OVERVIEW)
        assert driver.execute_script("return window.innerWidth") == PHONE
        buttons = admin.find_all(
            "#leasejobs-queues .leasejobs-pause, #leasejobs-queues .leasejobs-resume"
        )
        assert {b.text.lower() for b in buttons} == {"pause", "resume"}
        for button in buttons:
            assert_whole_in_view(admin, button, button.text)
        note = admin.find('#leasejobs-queues tr[data-queue="mail"] td.paused')
        lines = driver.execute_script(
            "const r = document.createRange(); r.selectNodeContents(arguments[0]);"
            "return new Set(Array.from(r.getClientRects(), c => Math.round(c.top))).size;",
            note,
        )
        assert lines <= 3, lines  # the note runs across the card, not a word per line
        sizes = driver.execute_script(
            """
            return Array.from(document.querySelectorAll(".leasejobs-svg text"), t =>
                parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a);
            """
        )
        assert sizes
        assert min(sizes) >= 10, sorted(sizes)[:5]


# -- 4. dark mode (A8) -----------------------------------------------------------------------


def test_a8_in_dark_mode_the_progress_track_is_the_admins_colour_not_white(admin):
    run = import_in_a_pass(timezone.now(), "contacts:eu")
    for path in (RUNS, change_page(run)):
        with window(admin, WIDE, TALL, dark=True):
            admin.open(path)
            assert admin.driver.execute_script(
                "return matchMedia('(prefers-color-scheme: dark)').matches"
            )
            track = admin.driver.execute_script(
                "return getComputedStyle(arguments[0]).backgroundColor",
                admin.find(".leasejobs-progress"),
            )
            assert track == admin.variable_colour("--border-color"), path  # the admin's own
            assert track not in ("rgb(255, 255, 255)", "rgb(229, 231, 235)"), (path, track)


# -- 5. the screenshots: each page in each shape (A8) -----------------------------------------


def test_a8_screenshots_of_the_held_run_a_failed_run_the_run_list_and_the_overview(admin):
    runs = a_day_of_runs(timezone.now())
    from .test_admin_overview_browser import live_work, statistics

    statistics()
    live_work()
    shoot(admin, change_page(runs["held"]), "held-run")
    shoot(admin, change_page(runs["failed"]), "failed-run")
    shoot(admin, RUNS, "run-list")
    shoot(admin, OVERVIEW, "overview")
    with window(admin, WIDE, TALL):
        admin.open(f"{RUNS}{runs['held'].pk}/release-resume/")
        admin.screenshot(f"a8/release-resume-1400-light-{VERSION}.png")
