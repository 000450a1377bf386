"""The operators' overview (SPEC §16 O4, O5; W6) in a real browser.

What an operator sees: both charts drawn (SVG elements of non-zero size, no
console error: the page has no script of its own and loads nothing from the
network), the charts' numbers the same as their tables' and as the
statistics written, at 1 400 px and at a phone's 375 px without the page
scrolling sideways, and in the admin's dark mode with readable text. A queue
is paused and resumed through its confirmation page, as an operator does it.

The screenshots of docs/operators.md (``overview-light.png``,
``overview-dark.png``, 1 400 px wide) are taken here: run with
``LEASEJOBS_SCREENSHOTS=1`` to write them into docs/_static/screenshots.
Run on Django 5.2 (``.venv``) and 6.1 (``.venv61``).
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from django.contrib.admin.models import ADDITION, DELETION, LogEntry
from django.utils import timezone

from django_leasejobs import pause_queue
from django_leasejobs.models import PassStat, PassStatHalfHour, PausedQueue, Run
from django_leasejobs.store.rollup import roll_up
from tests.factories import RunFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

OVERVIEW = "/admin/leasejobs/pausedqueue/overview/"
WIDE, TALL = 1400, 1000  # the session's window (tests/browser/conftest.py)

#: Minutes back from now that carry statistics: well inside the last hour, so a minute
#: turning between the writes and the page moves no row out of the window.
MINUTES = range(55)


def statistics():
    """Three jobs' passes over the last hour, as the workers would have flushed them (O1).

    Returns the passes written per outcome, what the page must add up to.
    """
    base = timezone.now().replace(second=0, microsecond=0)
    written = Counter()
    rows = []

    def add(minute, job, queue, outcome, count, bucket, seconds):
        rows.append(
            PassStat(
                minute=minute,
                job=job,
                queue=queue,
                outcome=outcome,
                count=count,
                total_seconds=count * seconds,
                max_seconds=seconds * 1.5,
                **{bucket: count},
            )
        )
        written[outcome] += count

    for back in MINUTES:
        minute = base - timedelta(minutes=back)
        add(minute, "imports.contacts", "default", "advanced", 30 + back * 7 % 25, "le_05", 0.2)
        add(minute, "imports.contacts", "default", "completed", 4 + back % 5, "le_05", 0.2)
        add(minute, "mail.digest", "mail", "completed", 12 + back * 5 % 9, "le_02", 0.02)
        if back % 7 == 3:
            add(minute, "imports.contacts", "default", "retrying", 2, "le_06", 0.4)
        if back % 10 == 0:
            add(minute, "reports.daily", "reports", "completed", 1, "le_11", 20.0)
        if back == 20:
            add(minute, "imports.contacts", "default", "failed", 1, "le_06", 0.4)
    PassStat.objects.bulk_create(rows)
    roll_up(PassStat, PassStatHalfHour, "default")  # their half-hours, as the flush adds them
    return written


def live_work():
    """Runs in three queues, one of them paused, one held run, and the failure of a job."""
    now = timezone.now()
    for n in range(4):
        RunFactory(job="mail.digest", queue="mail", next_attempt_at=now - timedelta(minutes=n))
    RunFactory(job="reports.daily", queue="reports", next_attempt_at=now + timedelta(hours=1))
    RunFactory(job="imports.contacts", status="held", failure_code="interrupted")
    RunFactory(
        job="imports.contacts",
        status="failed",
        failure_code="handler_failed",
        last_error="RuntimeError: the CRM answered 502 Bad Gateway\nTraceback ...",
    )
    pause_queue("mail", by="alice", note="SMTP relay down, back at 14:00")


def box(admin, element):
    return admin.driver.execute_script(
        "const r = arguments[0].getBoundingClientRect(); return [r.width, r.height];", element
    )


def assert_no_console_errors(admin):
    """Nothing went wrong in the page: no script error, no resource that failed to load.

    Except the browser's own ask for ``/favicon.ico``, which the test site does not serve.
    """
    errors = [
        entry
        for entry in admin.driver.get_log("browser")
        if entry["level"] == "SEVERE" and "/favicon.ico " not in entry["message"]
    ]
    assert not errors, errors


def assert_no_sideways_scroll(admin):
    width, inner = admin.driver.execute_script(
        "return [document.documentElement.scrollWidth, window.innerWidth];"
    )
    assert width <= inner, (width, inner)


def chart_counts(admin) -> Counter:
    counts = Counter()
    for bar in admin.find_all("#leasejobs-passes-chart rect"):
        counts[bar.get_attribute("data-outcome")] += int(bar.get_attribute("data-count"))
    return counts


def table_counts(admin) -> Counter:
    """The passes table's sums per outcome (read as text content: it is folded away)."""
    heads = [
        th.get_attribute("data-outcome")
        for th in admin.find_all("#leasejobs-passes-table thead th")
    ]
    counts = Counter()
    for row in admin.find_all("#leasejobs-passes-table tbody tr"):
        cells = [
            cell.get_attribute("textContent").strip() for cell in admin.find_all("th, td", row)
        ]
        for outcome, cell in zip(heads, cells, strict=True):
            if outcome:
                counts[outcome] += int(cell)
    return counts


def assert_charts_drawn_with_their_tables_numbers(admin, written):
    passes = admin.find("#leasejobs-passes-chart")
    width, height = box(admin, passes)
    assert width > 300
    assert height > 80
    bars = admin.find_all("#leasejobs-passes-chart rect")
    assert bars
    assert all(min(box(admin, bar)) > 0 for bar in bars[:20])
    assert chart_counts(admin) == table_counts(admin) == written
    assert int(passes.get_attribute("data-total")) == sum(written.values())

    durations = admin.find("#leasejobs-durations-chart")
    assert min(box(admin, durations)) > 0
    drawn = {
        group.get_attribute("data-job"): [
            rect.get_attribute("data-value") for rect in admin.find_all("rect", group)
        ]
        for group in admin.find_all("#leasejobs-durations-chart g.leasejobs-job")
    }
    listed = {
        row.get_attribute("data-job"): [admin.text("td.p50", row), admin.text("td.p95", row)]
        for row in admin.find_all("#leasejobs-jobs tbody tr")
    }
    assert drawn == listed
    assert set(drawn) == {"imports.contacts", "mail.digest", "reports.daily"}
    for group in admin.find_all("#leasejobs-durations-chart g.leasejobs-job rect"):
        assert min(box(admin, group)) > 0


@pytest.fixture
def window_size(admin):
    """Give the session's browser its size and colour scheme back after the test."""
    yield admin.driver
    admin.driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
    admin.driver.set_window_size(WIDE, TALL)


def test_o4_the_overview_draws_both_charts_with_the_numbers_of_its_tables(admin, window_size):
    written = statistics()
    live_work()
    admin.driver.get_log("browser")  # what the login page logged is not this page's
    admin.open("/admin/leasejobs/")
    admin.submit(admin.find("#leasejobs-overview-link caption a"))  # linked from the app index
    assert admin.driver.current_url.endswith(OVERVIEW)
    assert admin.find('.leasejobs-windows a[aria-current="page"]').text == "Last hour"

    assert_charts_drawn_with_their_tables_numbers(admin, written)
    assert_no_console_errors(admin)
    assert_no_sideways_scroll(admin)
    jobs = {
        row.get_attribute("data-job"): row for row in admin.find_all("#leasejobs-jobs tbody tr")
    }
    imports = jobs["imports.contacts"]
    assert admin.text("td.failures", imports) == str(written["retrying"] + written["failed"])
    assert "502 Bad Gateway" in admin.text("td.last-failure", imports)
    queues = {
        row.get_attribute("data-queue"): row for row in admin.find_all("#leasejobs-queues tbody tr")
    }
    assert admin.text("td.due", queues["mail"]) == "4"
    assert "alice" in admin.text("td.paused", queues["mail"])
    assert admin.text('[data-key="held"] .leasejobs-count') == "1"

    window_size.set_window_size(WIDE, 1700)  # the whole page, for the operators' guide
    admin.screenshot("overview-light.png")

    admin.submit(admin.driver.find_element("link text", "Last week"))
    assert admin.driver.current_url.endswith("?window=week")
    assert admin.find('.leasejobs-windows a[aria-current="page"]').text == "Last week"
    assert chart_counts(admin) == table_counts(admin) == written  # a week holds the same hour
    assert_no_console_errors(admin)


def test_o4_the_overview_fits_a_phone_without_scrolling_sideways(admin, window_size):
    written = statistics()
    live_work()
    window_size.set_window_size(375, 900)
    assert admin.driver.execute_script("return window.innerWidth;") == 375
    admin.driver.get_log("browser")
    admin.open(OVERVIEW)
    assert_no_sideways_scroll(admin)
    assert_charts_drawn_with_their_tables_numbers(admin, written)
    assert box(admin, admin.find("#leasejobs-passes-chart"))[0] <= 375  # scaled by its viewBox
    admin.screenshot("overview-phone.png", scroll_to="#leasejobs-passes-title")
    admin.open(f"{OVERVIEW}?window=day")
    assert_no_sideways_scroll(admin)
    assert_no_console_errors(admin)


READABLE = """
const page = getComputedStyle(document.body);
const label = getComputedStyle(document.querySelector("#leasejobs-passes-chart text"));
const cell = getComputedStyle(document.querySelector("#leasejobs-jobs td"));
const probe = document.createElement("div");
probe.style.color = "var(--body-bg)";
document.body.appendChild(probe);
const admin = getComputedStyle(probe).color;
probe.remove();
return {
    dark: matchMedia("(prefers-color-scheme: dark)").matches,
    background: page.backgroundColor, adminBackground: admin,
    text: page.color, label: label.fill, cell: cell.color,
};
"""


def luminance(rgb: str) -> float:
    red, green, blue = (
        int(part) for part in rgb[rgb.index("(") + 1 : rgb.index(")")].split(",")[:3]
    )
    return 0.2126 * red + 0.7152 * green + 0.0722 * blue


def test_o4_the_overview_reads_in_the_admins_dark_mode(admin, window_size):
    written = statistics()
    live_work()
    window_size.execute_cdp_cmd(
        "Emulation.setEmulatedMedia",
        {"features": [{"name": "prefers-color-scheme", "value": "dark"}]},
    )
    admin.driver.get_log("browser")
    admin.open(OVERVIEW)
    colours = admin.driver.execute_script(READABLE)
    assert colours["dark"]
    assert colours["background"] == colours["adminBackground"]  # the admin's dark background
    assert luminance(colours["background"]) < 60, colours
    for text in (colours["text"], colours["label"], colours["cell"]):
        assert text != colours["background"]
        assert luminance(text) - luminance(colours["background"]) > 100, colours
    assert_charts_drawn_with_their_tables_numbers(admin, written)
    assert_no_console_errors(admin)
    window_size.set_window_size(WIDE, 1700)
    admin.screenshot("overview-dark.png")


def test_o5_w6_a_queue_is_paused_and_resumed_through_its_confirmation(admin):
    Run.objects.all().delete()
    RunFactory(job="mail.digest", queue="mail")
    admin.open(OVERVIEW)
    row = admin.find('#leasejobs-queues tr[data-queue="mail"]')
    admin.submit(admin.find("a.leasejobs-pause", row))
    assert not PausedQueue.objects.exists()  # the confirmation only asks
    admin.find("#id_note").send_keys("SMTP relay down")
    admin.submit(admin.find('.leasejobs-confirm input[type="submit"]'))
    assert admin.driver.current_url.endswith(OVERVIEW)
    assert admin.messages("success") == ["Queue mail paused."]
    paused = PausedQueue.objects.get()
    assert (paused.queue, paused.paused_by, paused.note) == ("mail", "operator", "SMTP relay down")
    row = admin.find('#leasejobs-queues tr[data-queue="mail"]')
    assert "by operator" in admin.text("td.paused", row)
    assert LogEntry.objects.filter(action_flag=ADDITION, object_id=str(paused.pk)).exists()

    admin.submit(admin.find("a.leasejobs-resume", row))
    assert PausedQueue.objects.exists()
    admin.submit(admin.find('.leasejobs-confirm input[type="submit"]'))
    assert admin.messages("success") == ["Queue mail resumed."]
    assert not PausedQueue.objects.exists()
    assert LogEntry.objects.filter(action_flag=DELETION, object_id=str(paused.pk)).exists()
