"""The operators' overview (SPEC §16 O4, O5): access, the window, its numbers, bad rows.

The page's numbers are read back from its HTML -- the SVG bars' ``data-count``,
the tables' cells -- and compared with each other and with what
:mod:`django_leasejobs.figures` returns for the rows each test writes, at
minutes it knows (the clock is frozen at 2026-03-01 12:00 UTC).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import timedelta
from html.parser import HTMLParser

import pytest
from django.db import connection

from django_leasejobs import RunStatus, pause_queue, start
from django_leasejobs.admin.overview import SPANS, bounds
from django_leasejobs.figures import FAILURE_SCAN, coarse_window, last_failure, window
from django_leasejobs.models import Run
from tests.factories import RunFactory, ScheduleFactory
from tests.utils import (
    flushed_stat,
    half_hour_row,
    on_sqlite_only,
    stat_columns,
    store_text,
    user_with,
)

pytestmark = pytest.mark.django_db

OVERVIEW = "/admin/leasejobs/pausedqueue/overview/"
MINUTE = timedelta(minutes=1)


class Page(HTMLParser):
    """What a test reads of the overview: the bars, the tables' rows, elements by id."""

    def __init__(self, html: str):
        super().__init__()
        self.rects: list[dict[str, str]] = []
        self.tables: dict[str, list[list[str]]] = defaultdict(list)
        self.table: str | None = None
        self.cell: list[str] | None = None
        self.row: list[str] | None = None
        self.ids: set[str] = set()
        self.group: str | None = None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        found = dict(attrs)
        if "id" in found:
            self.ids.add(found["id"])
        if tag == "g" and "data-job" in found:
            self.group = found["data-job"]
        if tag == "rect":
            self.rects.append({**found, "job": self.group or ""})
        elif tag == "table":
            self.table = found.get("id")
        elif tag == "tr" and self.table:
            self.row = []
        elif tag in ("td", "th") and self.row is not None:
            self.cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None and self.row is not None:
            self.row.append(" ".join("".join(self.cell).split()))
            self.cell = None
        elif tag == "tr" and self.row is not None and self.table:
            self.tables[self.table].append(self.row)
            self.row = None
        elif tag == "table":
            self.table = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)

    def bars(self, chart_class="leasejobs-outcome-") -> dict[str, Counter]:
        """Interval label -> outcome -> passes, as the passes chart draws them."""
        drawn: dict[str, Counter] = defaultdict(Counter)
        for rect in self.rects:
            if rect.get("class", "").startswith(chart_class):
                drawn[rect["data-interval"]][rect["data-outcome"]] += int(rect["data-count"])
        return dict(drawn)

    def passes_table(self) -> dict[str, Counter]:
        head, *rows = self.tables["leasejobs-passes-table"]
        outcomes = head[1:-1]
        listed = {}
        for label, *cells in rows:
            counts = Counter(dict(zip(outcomes, map(int, cells[:-1]), strict=True)))
            assert int(cells[-1]) == sum(counts.values())  # the total column adds up
            listed[label] = +counts
        return listed

    def jobs(self) -> dict[str, list[str]]:
        head, *rows = self.tables["leasejobs-jobs"]
        assert head[:6] == ["Job", "Passes", "Failures", "Failure rate", "p50", "p95"]
        return {row[0]: row[1:] for row in rows}

    def durations(self) -> dict[str, tuple[str, str]]:
        values: dict[str, dict[str, str]] = defaultdict(dict)
        for rect in self.rects:
            if rect.get("class") in ("leasejobs-p50", "leasejobs-p95"):
                values[rect["job"]][rect["class"][-3:]] = rect["data-value"]
        return {job: (found["p50"], found["p95"]) for job, found in values.items()}


@pytest.fixture
def viewer(client):
    client.force_login(user_with("view_run"))
    return client


def stat(minute, job="t.a", outcome="completed", count=1, queue="q", **figures):
    """A minute's statistics row, added to its half-hour's as a flush adds it (O1)."""
    return flushed_stat(minute, job=job, queue=queue, outcome=outcome, count=count, **figures)


@pytest.fixture
def history(frozen_clock):
    """Statistics at known minutes around the three windows (now: 12:00 UTC)."""
    noon = frozen_clock.now()
    stat(noon - 60 * MINUTE, count=5, le_00=5, total_seconds=0.01)  # 11:00: out of the hour
    stat(noon - 59 * MINUTE, count=3, le_00=3, total_seconds=0.006)  # 11:01: the hour's first
    stat(noon - 30 * MINUTE, outcome="advanced", count=7, le_03=7, total_seconds=0.3)
    stat(noon - 30 * MINUTE, outcome="retrying", count=2, le_07=2, total_seconds=1.5)
    stat(noon, job="t.b", queue="q2", count=4, le_10=4, total_seconds=24, max_seconds=8)
    stat(noon - timedelta(hours=23), outcome="failed", count=1, le_07=1, total_seconds=0.9)
    stat(noon - timedelta(days=3), job="t.b", count=6, le_01=6, total_seconds=0.05)
    stat(noon - timedelta(days=8), count=100)  # older than any window
    return noon


# -- access (O4) --------------------------------------------------------------------------------


def test_o4_the_overview_is_linked_from_the_app_index_for_users_with_view_run(client):
    client.force_login(user_with("view_run"))
    index = client.get("/admin/leasejobs/").content.decode()
    assert f'href="{OVERVIEW}"' in index
    client.force_login(user_with("view_schedule", username="scheduler"))
    assert OVERVIEW not in client.get("/admin/leasejobs/").content.decode()


def test_o4_without_view_run_a_403_and_without_a_login_the_login_page(client):
    response = client.get(OVERVIEW)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")
    client.force_login(user_with("view_schedule", "change_run"))
    assert client.get(OVERVIEW).status_code == 403
    client.force_login(user_with("view_run", username="viewer"))
    assert client.get(OVERVIEW).status_code == 200


# -- the window (O4) ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("asked", "chosen", "intervals"),
    [
        ("hour", "hour", 60),
        ("day", "day", 48),
        ("week", "week", 42),
        ("", "hour", 60),
        ("month", "hour", 60),
        ("day\x00", "hour", 60),
    ],
)
def test_o4_the_window_selector_and_an_invalid_window_falls_back_to_the_hour(
    viewer, history, asked, chosen, intervals
):
    response = viewer.get(OVERVIEW, {"window": asked})
    assert response.status_code == 200
    span = response.context["span"]
    assert span.key == chosen
    since, until = response.context["since"], response.context["until"]
    assert until - since == span.length
    assert (until - since) / span.step == intervals
    assert since <= history < until  # the window ends with the interval now is in
    assert (
        f'href="?window={chosen}" class="selected" aria-current="page"' in response.content.decode()
    )


def test_o4_the_windows_end_on_their_steps_utc_grid(history):
    assert bounds(history, SPANS["hour"]) == (history - 59 * MINUTE, history + MINUTE)
    assert bounds(history + timedelta(minutes=40), SPANS["day"])[1] == history + timedelta(hours=1)
    since, until = bounds(history, SPANS["week"])
    assert until == history + timedelta(hours=4)  # 12:00 UTC is on the 4 h grid; 16:00 ends it
    assert until - since == timedelta(days=7)


# -- the numbers (O4) -----------------------------------------------------------------------------


def expected_by_label(found, span):
    """figures.window's series as the page labels it (UTC here): label -> outcome -> passes."""
    fmt = "%a %H:%M" if span.weekday else "%H:%M"
    return {start.strftime(fmt): Counter(counts) for start, counts in found.series.items()}


@pytest.mark.parametrize("key", ["hour", "day", "week"])
def test_o4_the_charts_numbers_equal_their_tables_and_the_figures(viewer, history, key):
    span = SPANS[key]
    since, until = bounds(history, span)
    found = window(since, until, span.step)  # the figures, read minute by minute
    page = Page(viewer.get(OVERVIEW, {"window": key}).content.decode())

    assert page.bars() == page.passes_table() == expected_by_label(found, span)
    jobs = page.jobs()
    assert set(jobs) == set(found.jobs)
    for name, figures in found.jobs.items():
        passes, failures, rate = jobs[name][:3]
        assert (int(passes), int(failures)) == (figures.passes, figures.failures)
        assert rate == f"{figures.failure_rate:.1%}"
    assert page.durations() == {name: tuple(row[3:5]) for name, row in jobs.items()}
    total = sum(sum(counts.values()) for counts in found.series.values())
    assert {"hour": 16, "day": 22, "week": 28}[key] == total  # what the fixture wrote in each


def test_o4_each_job_has_its_p50_and_p95_and_failure_rate(viewer, history):
    jobs = Page(viewer.get(OVERVIEW).content.decode()).jobs()
    # t.a in the hour: 3 passes <= 5 ms, 7 in (25, 50] ms, 2 failed (retrying) in (0.5, 1] s:
    # the 6th of 12 is 3/7 into (25, 50] ms, the 11.4th 1.4/2 into (0.5, 1] s.
    assert jobs["t.a"][:5] == ["12", "2", "16.7%", "35.7 ms", "850 ms"]
    # t.b: its 4 passes in (5, 10] s: the 2nd and the 3.8th of 4.
    assert jobs["t.b"][:5] == ["4", "0", "0.0%", "7.5 s", "9.75 s"]


def test_o4_coarse_window_sums_per_interval_what_window_reads_per_minute(history):
    # Each its own key: a half-hour holds the sum of its key's minutes.
    stat(history - 90 * MINUTE, outcome="exploded", count=2)  # unreadable: outcome
    stat(history - 91 * MINUTE, count=-1, queue="q-1")  # unreadable: a negative count
    stat(history - 92 * MINUTE, count=1, le_00=3, queue="q-2")  # more in its buckets than passes
    if connection.vendor != "mysql":  # MariaDB stores no infinity
        stat(history - 93 * MINUTE, count=1, total_seconds=float("inf"), queue="q-3")  # no time
    bad = 3 if connection.vendor == "mysql" else 4
    for key in ("day", "week"):
        span = SPANS[key]
        since, until = bounds(history, span)
        by_minute, by_interval = (
            window(since, until, span.step),
            coarse_window(since, until, span.step),
        )
        assert by_interval.series == by_minute.series
        assert by_interval.by_key == by_minute.by_key
        assert by_interval.unreadable == by_minute.unreadable == bad
        assert by_interval.jobs == by_minute.jobs


# -- rows that are not figures (O4, §11) ---------------------------------------------------------


@pytest.mark.parametrize("key", ["hour", "day", "week"])
def test_o4_s11_malformed_statistics_rows_are_shown_as_unreadable_never_a_500(
    viewer, frozen_clock, key
):
    at = frozen_clock.now() - 5 * MINUTE  # each row its own key, in its minute and half-hour
    stat(at, outcome="exploded", count=3)
    stat(at - MINUTE, count=-2, queue="q-1")
    stat(at - 2 * MINUTE, count=1, le_00=5, queue="q-2")
    stat(at - 3 * MINUTE, count=2, le_00=2, total_seconds=0.004)  # the one good row
    if connection.vendor == "postgresql":
        stat(at - 4 * MINUTE, count=1, total_seconds=float("nan"), queue="q-4")
    bad = 4 if connection.vendor == "postgresql" else 3
    response = viewer.get(OVERVIEW, {"window": key})
    assert response.status_code == 200
    page = Page(response.content.decode())
    assert "leasejobs-unreadable" in page.ids
    assert f"{bad} unreadable statistics rows in this window" in response.content.decode()
    assert page.jobs()["t.a"][0] == "2"  # the good row is still counted


def test_o4_s11_sums_past_what_the_database_holds_are_never_a_500(viewer, frozen_clock):
    """Two readable rows whose sum no float holds: PostgreSQL refuses the sum, SQLite sums
    to infinity, MariaDB to zero. Summed (a day, a week), the page says it cannot read the
    figures, or counts the rows of that sum as unreadable; minute by minute nothing is summed."""
    at = frozen_clock.now() - 5 * MINUTE
    for n in range(2):  # in two half-hours: what is summed is the window's, not a half-hour's
        stat(at - 31 * n * MINUTE, count=1, total_seconds=1.5e308, le_13=1)
    stat(at - 2 * MINUTE, count=2**53 + 1, queue="q2")  # not a whole count as a float: unreadable
    hour = viewer.get(OVERVIEW)
    assert hour.status_code == 200
    assert Page(hour.content.decode()).jobs()["t.a"][0] == "2"
    assert "1 unreadable statistics row in this window" in hour.content.decode()
    for key in ("day", "week"):
        response = viewer.get(OVERVIEW, {"window": key})
        assert response.status_code == 200
        text = response.content.decode()
        assert 'id="leasejobs-queues"' in text  # what is read apart is still shown
        if connection.vendor == "postgresql":  # "value out of range: overflow"
            assert "The figures cannot be read: " in text
        else:  # the two rows' sum, counted apart with the third
            assert "3 unreadable statistics rows in this window" in text


@on_sqlite_only
@pytest.mark.parametrize("column", stat_columns())
@pytest.mark.parametrize("key", ["hour", "day", "week"])
def test_o4_s11_text_in_a_number_column_is_counted_unreadable_never_a_500(
    viewer, frozen_clock, key, column
):
    """SQLite keeps text in a number's column: the row is counted unreadable, the rest shown."""
    at = frozen_clock.now() - 5 * MINUTE
    stat(at, count=2, le_00=2, total_seconds=0.004, max_seconds=0.003)
    stat(at, outcome="retrying", count=1, le_07=1, total_seconds=0.9, max_seconds=0.9)
    bad = stat(at - MINUTE, count=3, total_seconds=900.0, max_seconds=400.0, queue="q2")
    store_text(bad, column)
    store_text(half_hour_row(bad), column)  # as a restore or a hand edit of both tables
    response = viewer.get(OVERVIEW, {"window": key})
    assert response.status_code == 200
    text = response.content.decode()
    assert "1 unreadable statistics row in this window" in text
    page = Page(text)
    assert page.jobs()["t.a"][:5] == ["3", "1", "33.3%", "3.75 ms", "925 ms"]
    assert sum(sum(counts.values()) for counts in page.bars().values()) == 3


@pytest.mark.parametrize("key", ["hour", "day", "week"])
def test_o4_held_and_throttled_passes_count_but_never_in_the_durations(viewer, frozen_clock, key):
    """A held takeover's or a throttled pass's milliseconds would read as fast passes."""
    at = frozen_clock.now() - 5 * MINUTE
    stat(at, count=2, le_07=2, total_seconds=1.5, max_seconds=0.9)  # (0.5, 1] s
    stat(at, outcome="held", count=5, le_00=5, total_seconds=0.0125, max_seconds=0.003)
    stat(at, outcome="throttled", count=9, le_00=9, total_seconds=0.009, max_seconds=0.001)
    page = Page(viewer.get(OVERVIEW, {"window": key}).content.decode())
    assert page.jobs()["t.a"][:5] == ["16", "5", "31.2%", "750 ms", "975 ms"]
    assert page.durations() == {"t.a": ("750 ms", "975 ms")}
    assert sum(page.bars()[label]["held"] for label in page.bars()) == 5


def test_o4_a_count_past_2_53_is_unreadable_summed_or_not(history):
    stat(history - 90 * MINUTE, count=2**53 + 1)
    since, until = bounds(history, SPANS["day"])
    assert coarse_window(since, until, SPANS["day"].step).unreadable == 1
    assert window(since, until, SPANS["day"].step).unreadable == 1


# -- now: queues and what needs attention (O4, O5) ----------------------------------------------


def test_o4_o5_each_queue_with_its_due_runs_lag_and_pause(viewer, frozen_clock):
    now = frozen_clock.now()
    for n in range(3):
        run = start("tests.noop", instance=f"m{n}", queue="mail").run
        Run.objects.filter(pk=run.pk).update(next_attempt_at=now - timedelta(seconds=60 * n + 30))
    later = start("tests.noop", instance="later", queue="reports").run
    Run.objects.filter(pk=later.pk).update(next_attempt_at=now + timedelta(hours=1))
    pause_queue("mail", by="alice", note="SMTP down")
    page = Page(viewer.get(OVERVIEW).content.decode())
    rows = {row[0]: row[1:] for row in page.tables["leasejobs-queues"][1:]}
    assert rows["mail"][:3] == ["3", "2 min 30 s", "3"]  # a duration as every other (A8)
    assert rows["mail"][3].startswith("by alice at ")
    assert rows["mail"][3].endswith(": SMTP down")
    assert rows["reports"][:4] == ["0", "—", "1", "—"]
    assert rows["default"][:4] == ["0", "—", "0", "—"]  # named by the registered jobs, idle


def test_o4_held_stalled_throttled_and_overdue_each_link_to_a_list_that_opens(
    admin_client, frozen_clock
):
    now = frozen_clock.now()
    RunFactory(status=RunStatus.HELD, failure_code="interrupted")
    stalled = RunFactory(job="tests.noop", started_at=now - timedelta(hours=2))
    RunFactory(job="tests.noop", started_at=now - timedelta(minutes=1))
    throttled = RunFactory(throttled_by="rate", lease_owner=None, started_at=now)
    ScheduleFactory(overdue_since=now - timedelta(hours=1))
    response = admin_client.get(OVERVIEW)
    found = {item["key"]: item for item in response.context["attention"]}
    assert {key: item["n"] for key, item in found.items()} == {
        "held": 1,
        "stalled": 1,
        "throttled": 1,
        "overdue": 1,
    }
    held = admin_client.get(found["held"]["url"])
    assert held.status_code == 200
    assert [run.status for run in held.context["cl"].result_list] == ["held"]
    old = admin_client.get(found["stalled"]["url"])
    assert [run.pk for run in old.context["cl"].result_list] == [stalled.pk]
    waiting = admin_client.get(found["throttled"]["url"]).context["cl"].result_list
    assert [run.pk for run in waiting] == [throttled.pk]  # not every live run
    assert admin_client.get(found["overdue"]["url"]).status_code == 200


def test_a8_the_stalled_count_reads_as_a_count_of_running_runs_not_a_status(viewer):
    found = {item["key"]: item for item in viewer.get(OVERVIEW).context["attention"]}
    stalled = found["stalled"]
    assert str(stalled["label"]) == "Runs live past their stall time"
    assert str(stalled["hint"]).startswith("how many running runs have been live longer")
    assert "status" not in str(stalled["label"]).lower()


def test_a8_the_window_says_from_when_to_now_in_the_zone_it_names(viewer, frozen_clock):
    content = viewer.get(OVERVIEW, {"window": "week"}).content.decode()
    # 12:00 UTC on the 4 h grid: the week's intervals end at 16:00, but the page says "now".
    assert "From 2026-02-22 16:00:00 UTC to now, 2026-03-01 12:00:00 UTC" in content
    assert "Times in UTC." in content
    assert "Interval (UTC)" in content or "No passes were recorded" in content


# -- the last failure of each job (O4) ------------------------------------------------------------


def test_o4_each_failing_jobs_last_failure_links_to_its_newest_failing_run(viewer, history):
    RunFactory(job="t.a", status="failed", failure_code="timeout", last_error="old")
    newest = RunFactory(
        job="t.a",
        status="failed",
        failure_code="handler_failed",
        last_error="RuntimeError: <b>502</b>\nTraceback (most recent call last): ...",
    )
    RunFactory(job="t.a", status="cancelled", failure_code="cancelled")  # not a failure
    RunFactory(job="t.a", status="done")
    html = viewer.get(OVERVIEW).content.decode()
    last = Page(html).jobs()["t.a"][5]
    assert last == "handler_failed: RuntimeError: <b>502</b>"
    assert f'href="/admin/leasejobs/run/{newest.pk}/change/">handler_failed</a>' in html
    assert "&lt;b&gt;502&lt;/b&gt;" in html  # an error is text, never markup
    retrying = RunFactory(job="t.a", failure_code="lease_expired", attempts=1)
    assert last_failure("t.a").run == retrying.pk  # a live run whose last pass failed


def test_o4_the_last_failure_is_a_bounded_read_of_the_jobs_newest_runs(history):
    RunFactory(job="t.a", status="failed", failure_code="handler_failed")
    for _ in range(3):
        RunFactory(job="t.a", status="done")
    assert last_failure("t.a", scan=4) is not None
    assert last_failure("t.a", scan=3) is None  # older than the newest 3: not read
    assert FAILURE_SCAN == 200
