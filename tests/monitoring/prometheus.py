"""A real Prometheus for one test: ``/usr/bin/prometheus`` on a free port, its data in a tmp dir.

It scrapes every second and evaluates the shipped rules every second. The
test's fixture ends it (:func:`tests.processes.end`) whatever happens.
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from tests.processes import spawned
from tests.utils import free_port, tool, wait_for

from .shipped import VIEW_JOB, WORKERS_JOB, rules_file

#: Scrape and evaluate every second: a test waits seconds, not minutes.
EVERY = "1s"


class PrometheusError(AssertionError):
    """Prometheus refused a query (its own error text)."""


class Prometheus:
    """One Prometheus process scraping the view and one worker, and its HTTP API."""

    def __init__(self, directory: Path, *, view: str, token: str, worker: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = directory / "prometheus.log"
        config = directory / "prometheus.yml"
        config.write_text(json.dumps(self.config(view, token, worker), indent=2))  # JSON is YAML
        self.command = [
            tool("prometheus"),
            f"--config.file={config}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]
        self.process: subprocess.Popen | None = None

    @staticmethod
    def config(view: str, token: str, worker: str) -> dict:
        """The scrape jobs the shipped rules assume: the view (bearer token) and the worker."""
        return {
            "global": {
                "scrape_interval": EVERY,
                "scrape_timeout": EVERY,
                "evaluation_interval": EVERY,
            },
            "rule_files": [str(rules_file())],
            "scrape_configs": [
                {
                    "job_name": VIEW_JOB,
                    "metrics_path": "/metrics/leasejobs",
                    "authorization": {"type": "Bearer", "credentials": token},
                    "static_configs": [{"targets": [view]}],
                },
                {"job_name": WORKERS_JOB, "static_configs": [{"targets": [worker]}]},
            ],
        }

    def start(self, seconds: float) -> None:
        with self.log.open("w") as log:
            self.process = spawned(  # ended by the test's teardown, whatever happened
                subprocess.Popen(
                    self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
                )
            )
        wait_for(self.ready, "Prometheus to be ready", seconds)

    def ready(self) -> bool:
        assert self.process is not None
        assert self.process.poll() is None, f"Prometheus exited:\n{self.tail()}"
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=60) as answer:
                return answer.status == 200
        except (urllib.error.URLError, ConnectionError):
            return False

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def api(self, path: str, **params: str) -> dict | list:
        """``GET /api/v1/<path>``'s ``data``; a refusal raises :class:`PrometheusError`."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=60) as answer:
                body = json.load(answer)
        except urllib.error.HTTPError as refused:  # 400, 422: the body says why
            body = json.load(refused)
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        """The instant vector *expr* evaluates to now, each ``{"metric": ..., "value": ...}``."""
        data = self.api("query", query=expr)
        assert isinstance(data, dict)
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def values(self, expr: str, *labels: str) -> dict[tuple[str, ...], float]:
        """``{(label values...): value}`` of *expr* now, keyed by *labels* in that order."""
        return {
            tuple(found["metric"].get(label, "") for label in labels): float(found["value"][1])
            for found in self.query(expr)
        }

    def alerts(self, name: str) -> dict[tuple[str, ...], str]:
        """The alerts called *name* now, pending or firing: ``{(job_name, queue): state}``."""
        data = self.api("alerts")
        assert isinstance(data, dict)
        return {
            (alert["labels"].get("job_name", ""), alert["labels"].get("queue", "")): alert["state"]
            for alert in data["alerts"]
            if alert["labels"]["alertname"] == name
        }

    def rules(self) -> list[dict]:
        """Every rule Prometheus loaded, as ``/api/v1/rules`` shows it (health, last error)."""
        data = self.api("rules")
        assert isinstance(data, dict)
        return [rule for group in data["groups"] for rule in group["rules"]]
