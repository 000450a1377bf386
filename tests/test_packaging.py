"""Packaging and the docs a new user copies from (issue 18): what ships, what the pages print.

Fast: these tests read files and build nothing. The build itself (``twine check``, the
licence inside the wheel and the sdist) is checked by hand, as the issue records.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import tomllib
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
