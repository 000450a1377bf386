"""O2, revision 4: the OpenTelemetry how-to's code runs as written, with what it says to install.

``docs/howto/opentelemetry.md`` gives one install line and one block of set-up
code. The block runs here, unchanged, in a process of its own that then drives
a run: its spans reach the OTLP endpoint the exporter is pointed at (a local
HTTP server standing in for a Collector). Every module the block imports comes
from a package its install line names.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from django_leasejobs import RunStatus, start
from tests.processes import python
from tests.utils import fresh

HOWTO = Path(__file__).resolve().parents[1] / "docs" / "howto" / "opentelemetry.md"


def _between(marker: str) -> str:
    """The fenced block between ``<!-- marker -->`` and ``<!-- /marker -->`` in the how-to."""
    text = HOWTO.read_text()
    block = text.split(f"<!-- {marker} -->", 1)[1].split(f"<!-- /{marker} -->", 1)[0]
    return "\n".join(line for line in block.strip().splitlines() if not line.startswith("```"))


def _installed_by_the_line() -> set[str]:
    (line,) = _between("otel-install").splitlines()
    words = line.split()
    assert words[:2] == ["pip", "install"], line
    return {re.split(r"[\[<>=]", word.strip("\"'"))[0].lower() for word in words[2:]}


def _imported(code: str) -> set[str]:
    """The modules *code* imports (``from a import b``: ``a.b`` where that is a module)."""
    modules = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                inner = f"{node.module}.{alias.name}"
                modules.add(inner if importlib.util.find_spec(inner) else node.module)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return modules


def test_o2_every_module_the_howto_imports_comes_from_a_package_it_installs():
    named = _installed_by_the_line() | {"opentelemetry-api"}  # the extra's own
    by_top = packages_distributions()
    for module in _imported(_between("otel-setup")):
        # A namespace package (opentelemetry) spans distributions: find the one holding it.
        spec = importlib.util.find_spec(module)
        assert spec is not None, f"{module} does not import"
        assert spec.origin, f"{module} is a namespace, not a module"
        origin = Path(spec.origin).resolve()
        owners = {
            dist.lower() for dist in by_top.get(module.split(".")[0], []) if _holds(dist, origin)
        }
        assert owners & named, f"{module} comes from {owners}, not on the install line"


def _holds(distribution: str, origin: Path) -> bool:
    from importlib.metadata import distribution as find

    found = find(distribution)
    return any(
        Path(str(found.locate_file(file))).resolve() == origin for file in (found.files or [])
    )


class _Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint that keeps what it is sent."""

    received: list[bytes] = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append(self.path.encode() + b" " + body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def collector():
    _Collector.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Collector.received
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.mark.django_db(transaction=True)
@pytest.mark.concurrency
def test_o2_o3_the_howtos_setup_runs_unchanged_and_a_pass_span_reaches_the_collector(collector):
    endpoint, received = collector
    run = start("tests.noop", instance="traced").run
    code = "\n".join(
        [
            "import os",
            f"os.environ['OTEL_EXPORTER_OTLP_ENDPOINT'] = {endpoint!r}",
            _between("otel-setup"),
            "from django_leasejobs import run_due_jobs",
            "assert run_due_jobs(jobs=['tests.noop']).completed == 1",
            "provider.shutdown()  # flushes the batch",
        ]
    )
    worker = python(code)
    try:
        _out, err = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert worker.returncode == 0, err
    assert fresh(run).status == RunStatus.DONE
    (sent,) = [body for body in received if body.startswith(b"/v1/traces ")]
    assert b"leasejobs.pass tests.noop" in sent
    assert run.pk.encode() in sent
    assert b"shop" in sent  # the resource's service.name, as the how-to sets it
