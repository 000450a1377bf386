"""The shipped Prometheus rules, checked by Prometheus's own promtool (SPEC §16, O2 revision 4).

``promtool`` comes with Debian's ``prometheus`` (``-m tools``): a test
without it fails. The unit tests themselves are ``tests/monitoring/
prometheus-rules-test.yml``; they run against the rules file the installed
package carries.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml

from tests.monitoring.shipped import (
    RULES_TESTS,
    alerts,
    every_expr,
    recordings,
    rules,
    rules_file,
)
from tests.utils import tool

pytestmark = pytest.mark.tools


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [tool("promtool"), *args], capture_output=True, text=True, timeout=120, check=False
    )


def unit_tests() -> dict:
    return yaml.safe_load(RULES_TESTS.read_text(encoding="utf-8"))


def test_o2_r4_promtool_checks_the_shipped_rules():
    """O2 rev. 4: ``promtool check rules`` accepts the file the package ships."""
    checked = promtool("check", "rules", str(rules_file()))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules())} rules found" in checked.stdout


def test_o2_r4_promtool_unit_tests_of_every_alert_and_recording_rule_pass(tmp_path):
    """The unit tests, run against the installed package's rules file (what users load)."""
    tests = unit_tests()
    tests["rule_files"] = [str(rules_file())]
    copy = tmp_path / RULES_TESTS.name
    copy.write_text(json.dumps(tests), encoding="utf-8")  # JSON is YAML
    tested = promtool("test", "rules", str(copy))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_o2_r4_every_alert_is_tested_firing_and_quiet_and_every_recording_rule_tested():
    """O2 rev. 4: each alert has a case where it fires and one where it stays quiet; each
    recording rule is evaluated by a ``promql_expr_test``."""
    fires, quiet, evaluated = set(), set(), []
    for group in unit_tests()["tests"]:
        for case in group.get("alert_rule_test", []):
            (fires if case.get("exp_alerts") else quiet).add(case["alertname"])
        evaluated += [case["expr"] for case in group.get("promql_expr_test", [])]
    assert set(alerts()) - fires == set(), "alerts never tested firing"
    assert set(alerts()) - quiet == set(), "alerts never tested quiet"
    words = {word for expr in evaluated for word in re.findall(r"[\w:]+", expr)}
    untested = set(recordings()) - words
    assert untested == set()


def test_o2_r4_every_shipped_query_parses(tmp_path):
    """Every rule's and every dashboard panel's query, as Prometheus would parse it: each
    written as a recording rule of a scratch file that promtool checks."""
    queries = every_expr()
    scratch = {
        "groups": [
            {
                "name": "every-shipped-query",
                "rules": [
                    {"record": f"leasejobs_shipped:query_{n}", "expr": expr}
                    for n, expr in enumerate(queries.values())
                ],
            }
        ]
    }
    path = tmp_path / "queries.yml"
    path.write_text(json.dumps(scratch), encoding="utf-8")
    checked = promtool("check", "rules", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(queries)} rules found" in checked.stdout
