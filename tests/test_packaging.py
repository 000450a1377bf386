"""Packaging and the docs a new user copies from (issue 18): what ships, what the pages print.

Fast: these tests read files, and one builds a wheel (a few seconds) to open it: the
monitoring files operators load from the installed package (O2). The rest of the build
(``twine check``, the licence inside the wheel and the sdist) is checked by hand, as the
issue records.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from fnmatch import fnmatch
from pathlib import Path

from django.apps import apps
from django.db.utils import ConnectionHandler

from django_leasejobs import checks
from django_leasejobs.report import DriveReport, Note

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
#: Where a README link must point: PyPI renders the README with no docs/ folder beside it.
DOCS_URL = PYPROJECT["project"]["urls"]["Documentation"].rstrip("/") + "/en/latest/"
#: The pages that show what ``rundueJobs`` prints.
REPORT_PAGES = ["docs/install.md", "docs/tutorial.md", "docs/reference/command.md"]
#: What the package ships for Prometheus and Grafana (SPEC §16 O2, revision 4).
MONITORING = ["monitoring/grafana-dashboard.json", "monitoring/prometheus-rules.yml"]
#: DriveReport's counts, in the order its summary line prints them.
COUNTS = [f.name for f in dataclasses.fields(DriveReport) if isinstance(f.default, int)]


def read(path: str) -> str:
    return (ROOT / path).read_text(encoding="utf-8")


def fenced(text: str, language: str) -> list[str]:
    """Return the bodies of the ``` blocks of *language* in a Markdown text."""
    pattern = rf"^```{re.escape(language)}[ \t]*\n(.*?)^```"
    return re.findall(pattern, text, flags=re.MULTILINE | re.DOTALL)


def section(text: str, title: str) -> str:
    """Return the body of a ``## title`` section of a Markdown text."""
    found = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert found, f"no '## {title}' section"
    return found[1]


def notes(count: int) -> list[Note]:
    return [Note("01JDQ8Z3K4V6W2T9B5N7M1C0XE", "ConnectionError: supplier down")] * count


def test_licence_text_ships_with_the_package():
    licence = read("LICENSE")
    assert licence.startswith("MIT License\n")
    assert "Copyright (c) 2026 django-leasejobs contributors" in licence
    assert "Permission is hereby granted, free of charge" in licence
    assert 'THE SOFTWARE IS PROVIDED "AS IS"' in licence
    project = PYPROJECT["project"]
    assert project["license"] == "MIT"
    # PEP 639: setuptools copies these into the sdist and the wheel's .dist-info/licenses/.
    assert project["license-files"] == ["LICENSE"]
    (setuptools,) = [r for r in PYPROJECT["build-system"]["requires"] if "setuptools" in r]
    minimum = re.fullmatch(r"setuptools>=(\d+)(\.\d+)*", setuptools)
    assert minimum, setuptools
    assert int(minimum[1]) >= 77, "license-files needs setuptools 77 (PEP 639)"


def test_docs_migrate_the_app_label():
    label = apps.get_app_config("leasejobs").label
    assert label == "leasejobs"
    labels = {config.label for config in apps.get_app_configs()}
    pages = ["README.md"]
    pages += [str(path.relative_to(ROOT)) for path in sorted((ROOT / "docs").rglob("*.md"))]
    for page in pages:
        text = read(page)
        assert "migrate django_leasejobs" not in text, page
        for target in re.findall(r"manage\.py migrate ([A-Za-z_][\w.]*)", text):
            assert target in labels, f"{page}: migrate {target} (app labels: {sorted(labels)})"


def test_report_examples_show_every_count():
    assert "throttled" in COUNTS  # the count the examples had left out
    for page in REPORT_PAGES:
        text = read(page)
        blocks = fenced(text, "console") + fenced(text, "text")
        lines = [line for block in blocks for line in block.splitlines()]
        summaries = [line for line in lines if line.startswith("attempted=")]
        assert summaries, f"{page} shows no report line"
        for line in summaries:
            shown = dict(pair.split("=", 1) for pair in line.split())
            assert list(shown) == [*COUNTS, "errors", "warnings"], f"{page}: {line}"
            report = DriveReport(
                **{name: int(shown[name]) for name in COUNTS},
                errors=notes(int(shown["errors"])),
                warnings=notes(int(shown["warnings"])),
            )
            assert report.summary() == line, page
        for block in fenced(text, "json"):
            shown = json.loads(block)
            if "attempted" not in shown:
                continue
            assert set(shown) == set(DriveReport().as_dict()), page
            report = DriveReport(
                **{name: shown[name] for name in COUNTS},
                errors=[Note(**note) for note in shown["errors"]],
                warnings=[Note(**note) for note in shown["warnings"]],
                aborted=shown["aborted"],
            )
            # What --json writes: one line, sorted keys (management/base.py).
            assert block.strip() == json.dumps(report.as_dict(), sort_keys=True), page
    keys_table = section(read("docs/reference/command.md"), "The report")
    for name in DriveReport().as_dict():
        assert f"| `{name}` |" in keys_table, f"the report's key {name} is not described"


def test_readme_links_survive_pypi():
    readme = read("README.md")
    targets = re.findall(r"\]\(([^)\s]+)\)", readme)
    assert targets
    relative = [t for t in targets if not re.match(r"(https?://|#)", t)]
    assert relative == [], "PyPI shows the README alone: link the hosted docs instead"
    assert "](docs/" not in readme
    pages = [t.removeprefix(DOCS_URL) for t in targets if t.startswith(DOCS_URL)]
    assert "howto/tasks.html" in pages
    for page in pages:
        source = (page.removesuffix(".html") if page else "index") + ".md"
        assert (ROOT / "docs" / source).is_file(), f"{page} has no docs/{source}"


def test_readme_sqlite_options_silence_w002(monkeypatch, tmp_path):
    install = section(read("README.md"), "Install")
    (block,) = [body for body in fenced(install, "python") if "DATABASES" in body]
    namespace: dict[str, object] = {"BASE_DIR": tmp_path}
    exec(block, namespace)  # our own README's settings block
    databases = namespace["DATABASES"]
    assert databases["default"]["ENGINE"] == "django.db.backends.sqlite3"
    options = databases["default"]["OPTIONS"]

    # check_databases reads the connections' settings; give it a site with the README's.
    monkeypatch.setattr(checks, "connections", ConnectionHandler(databases))
    assert checks.check_databases(databases=["default"]) == []

    bare = {"default": {**databases["default"], "OPTIONS": {}}}
    monkeypatch.setattr(checks, "connections", ConnectionHandler(bare))
    (warning,) = checks.check_databases(databases=["default"])
    assert warning.id == "leasejobs.W002"
    # And the README recommends what the warning's hint does, option for option.
    hinted = re.search(r"OPTIONS = (\{.*\})", warning.hint)
    assert hinted, warning.hint
    assert options == ast.literal_eval(hinted[1])


def test_o2_r4_the_monitoring_files_are_package_data():
    """O2 rev. 4: every file of ``monitoring/`` matches a package-data pattern."""
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["django_leasejobs"]
    package = ROOT / "django_leasejobs"
    shipped = sorted(str(p.relative_to(package)) for p in (package / "monitoring").iterdir())
    assert shipped == MONITORING
    for path in shipped:
        assert any(fnmatch(path, pattern) for pattern in patterns), path


def test_o2_r4_a_built_wheel_carries_the_monitoring_files(tmp_path):
    """Built from a copy of the sources, so that two test runs never share a build dir."""
    source = tmp_path / "source"
    shutil.copytree(
        ROOT / "django_leasejobs",
        source / "django_leasejobs",
        ignore=shutil.ignore_patterns("__pycache__", "*.py[cod]"),
    )
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), source],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("django_leasejobs-*.whl")
    with zipfile.ZipFile(wheel) as opened:
        for path in MONITORING:
            carried = opened.read(f"django_leasejobs/{path}")
            assert carried == (ROOT / "django_leasejobs" / path).read_bytes(), path
