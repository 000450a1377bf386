"""The shipped Prometheus rules and Grafana dashboard, read as text (SPEC §16, O2 revision 4).

No program needed: what each query may group by and how it reads the view's
figures. Prometheus itself checks them in ``test_monitoring_rules.py`` and
``test_monitoring_prometheus.py`` (``-m tools``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.monitoring.shipped import (
    VIEW_JOB,
    WORKERS_JOB,
    alerts,
    dashboard,
    every_expr,
    grouping,
    panel_queries,
    panels,
)
from tests.utils import tool

#: The view's families: every web process answers the same, so each is read through
#: ``max`` (keeping these labels) before anything sums it.
VIEW_FAMILIES = {
    "leasejobs_passes_15m": {"job_name", "queue", "outcome"},
    "leasejobs_pass_seconds_15m_bucket": {"job_name", "queue", "le"},
    "leasejobs_pass_seconds_15m_count": {"job_name", "queue"},
    "leasejobs_pass_seconds_15m_sum": {"job_name", "queue"},
    "leasejobs_due_runs": {"queue"},
    "leasejobs_oldest_due_seconds": {"queue"},
    "leasejobs_queue_paused": {"queue"},
    "leasejobs_live_runs": {"status"},
    "leasejobs_held_runs": set(),
    "leasejobs_stalled_runs": set(),
    "leasejobs_throttled_runs": set(),
    "leasejobs_overdue_schedules": set(),
}
#: The per-job families, which a dashboard panel filters by its job_name variable.
PER_JOB = ("leasejobs_passes_total", "leasejobs_pass_seconds_bucket", *list(VIEW_FAMILIES)[:4])
MONITORING_PAGE = Path(__file__).resolve().parent.parent / "docs" / "howto" / "monitoring.md"


def test_o2_r4_no_shipped_query_groups_by_job_or_reads_exported_job():
    """``job`` is Prometheus's scrape job, never a job of ours: nothing groups by it, and
    only the ``up`` alerts match on it."""
    for where, expr in every_expr().items():
        assert "exported_job" not in expr, where
        for labels in grouping(expr):
            assert "job" not in labels, where
        if re.search(r"\bjob\s*=", expr):
            assert expr.startswith("up{"), where


@pytest.mark.parametrize("family", VIEW_FAMILIES)
def test_o2_r4_the_views_families_are_read_through_max_before_any_sum(family):
    """Several web processes answer the same figures: ``max by (job_name, queue, outcome)``
    first, then ``sum``; a ``sum`` or ``max by (job, ...)`` first would double them."""
    for where, expr in every_expr().items():
        for found in re.finditer(rf"(?<![\w:]){family}(?![\w:])", expr):
            before = expr[: found.start()]
            reader = re.search(r"max\s*(?:by\s*\(([^)]*)\))?\s*\(\s*$", before)
            assert reader, f"{where}: {family} not read through max: {expr}"
            kept = {label.strip() for label in (reader[1] or "").split(",") if label.strip()}
            assert VIEW_FAMILIES[family] <= kept or reader[1] is None, (where, kept)


def test_o2_r4_the_dashboard_is_built_on_job_name_and_queue():
    """O2 rev. 4: its variables are job_name and queue, and every per-job panel filters by
    both; every panel reads the data source the importer picks."""
    board = dashboard()
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert {"datasource", "job_name", "queue"} <= set(variables)
    for name in ("job_name", "queue"):
        assert f"{name})" in variables[name]["definition"]  # label_values(..., job_name)
        assert variables[name]["includeAll"]
    ids = [panel["id"] for panel in board["panels"]]
    ids += [inner["id"] for row in board["panels"] for inner in row.get("panels", [])]
    assert len(ids) == len(set(ids))
    for panel in panels(board):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
    for where, expr in panel_queries().items():
        for family in PER_JOB:
            if re.search(rf"(?<![\w:]){family}\{{", expr):
                assert 'job_name=~"$job_name"' in expr, where
                assert 'queue=~"$queue"' in expr, where


def test_o2_r4_the_monitoring_page_documents_the_shipped_files_and_fixes_every_query():
    """O2 rev. 4: the how-to names every alert, how to load the rules and which scrape jobs
    they assume, and no query on it groups by ``job``."""
    page = MONITORING_PAGE.read_text(encoding="utf-8")
    for name in alerts():
        assert name in page, name
    for text in ("rule_files", "prometheus-rules.yml", "grafana-dashboard.json"):
        assert text in page, text
    assert f"job_name: {VIEW_JOB}" in page
    assert f"job_name: {WORKERS_JOB}" in page
    assert "exported_job" in page  # says why the label is job_name
    for labels in grouping(page):
        assert "job" not in labels, labels
    assert not re.search(r"\{job,|\bjob\}|`job`, `queue`", page)


def test_o2_tools_fail_never_skip_without_their_program(monkeypatch):
    """A ``tools`` test on a machine without Debian's program fails, naming the package."""
    monkeypatch.setattr("shutil.which", lambda *args, **kwargs: None)
    with pytest.raises(AssertionError, match=r"apt-get install prometheus \(\.ci/run"):
        tool("promtool")
