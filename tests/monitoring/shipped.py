"""What ``django_leasejobs/monitoring/`` ships, read as the tests need it (SPEC §16 O2, revision 4).

The files are found through the installed package, so under tox (which
installs the wheel) the tests read the copies the wheel carries.
"""

from __future__ import annotations

import json
import re
from importlib.resources import files
from pathlib import Path

import yaml

#: The scrape jobs the shipped rules' ``up`` alerts name (docs/howto/monitoring.md).
VIEW_JOB = "leasejobs"
WORKERS_JOB = "leasejobs-workers"
#: The unit tests of the rules, for ``promtool test rules``.
RULES_TESTS = Path(__file__).with_name("prometheus-rules-test.yml")
#: What a dashboard variable stands for when its query runs outside Grafana: every value.
VARIABLES = {"$job_name": ".*", "$queue": ".*", "$__rate_interval": "5m"}


def monitoring() -> Path:
    """The directory the package ships its monitoring files in."""
    return Path(str(files("django_leasejobs") / "monitoring"))


def rules_file() -> Path:
    return monitoring() / "prometheus-rules.yml"


def dashboard_file() -> Path:
    return monitoring() / "grafana-dashboard.json"


def rules() -> list[dict]:
    """Every rule of every group in the shipped rules file, in order."""
    groups = yaml.safe_load(rules_file().read_text(encoding="utf-8"))["groups"]
    return [rule for group in groups for rule in group["rules"]]


def alerts() -> dict[str, str]:
    """``{alert name: expr}`` of the shipped alerts."""
    return {rule["alert"]: rule["expr"] for rule in rules() if "alert" in rule}


def recordings() -> dict[str, str]:
    """``{recorded name: expr}`` of the shipped recording rules."""
    return {rule["record"]: rule["expr"] for rule in rules() if "record" in rule}


def dashboard() -> dict:
    return json.loads(dashboard_file().read_text(encoding="utf-8"))


def panels(board: dict | None = None) -> list[dict]:
    """Every panel of the dashboard, those inside rows included; rows themselves left out."""
    found = []
    for panel in (board or dashboard())["panels"]:
        if panel["type"] == "row":
            found += panel.get("panels", [])
        else:
            found.append(panel)
    return found


def panel_queries() -> dict[str, str]:
    """``{"<panel title> [<refId>]": expr}`` of every query of every panel, as written."""
    return {
        f"{panel['title']} [{target['refId']}]": target["expr"]
        for panel in panels()
        for target in panel["targets"]
    }


def runnable(expr: str) -> str:
    """*expr* with the dashboard's variables replaced, as Grafana sends it to Prometheus."""
    for variable, value in VARIABLES.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, f"a variable the tests do not know: {expr}"
    return expr


def every_expr() -> dict[str, str]:
    """Every PromQL expression shipped, by where it comes from, runnable as it stands."""
    found = {f"rule {name}": expr for name, expr in {**recordings(), **alerts()}.items()}
    found |= {f"panel {where}": runnable(expr) for where, expr in panel_queries().items()}
    return found


def grouping(expr: str) -> list[list[str]]:
    """The label lists of every ``by (...)`` / ``without (...)`` clause of *expr*."""
    return [
        [label.strip() for label in labels.split(",") if label.strip()]
        for labels in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr)
    ]
