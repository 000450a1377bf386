"""Sphinx configuration for the django-leasejobs documentation.

Build with ``sphinx-build -W --keep-going -b html docs docs/_build/html`` from
the repository root. Autodoc imports the package, and the package imports
models, so Django is set up first against the test project's settings.

Some reference pages are written by hand rather than generated (a table reads
better than a docstring dump). :func:`check_reference_pages` keeps them honest:
when a setting, check id, failure code or model field is added to the code but
not to its page, the build warns, and ``-W`` turns that into a failure.
"""

import inspect
import os
import re
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import django

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
django.setup()

from django.core.checks.registry import registry as check_registry  # noqa: E402
from sphinx.application import Sphinx  # noqa: E402
from sphinx.util import logging  # noqa: E402

import django_leasejobs  # noqa: E402
from django_leasejobs.conf import SPECS  # noqa: E402
from django_leasejobs.models import Run, Step  # noqa: E402
from django_leasejobs.states import FailureCode  # noqa: E402

# -- Project -------------------------------------------------------------------

project = "django-leasejobs"
author = "django-leasejobs contributors"
copyright = "django-leasejobs contributors"
release = django_leasejobs.__version__
version = ".".join(release.split(".")[:2])

# -- General -------------------------------------------------------------------

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    # No sphinx.ext.intersphinx: the docs must build offline (CI has no
    # internet), and an unreachable inventory is a warning, which -W fails on.
    # Links to the Python and Django docs are written as plain URLs instead.
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]

myst_enable_extensions = ["colon_fence", "deflist"]

# -- Autodoc and napoleon --------------------------------------------------------

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True

napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
# One field per entry, so a grouped entry ("schedule, timezone, missed") stays one.
napoleon_use_param = False

# -- HTML ----------------------------------------------------------------------

html_theme = "furo"
html_title = f"django-leasejobs {release}"
html_static_path: list[str] = []

# -- Hand-written reference pages stay in step with the code ---------------------

logger = logging.getLogger(__name__)

_ROW = re.compile(r"^\|\s*`(?P<key>[A-Z_]+)`\s*\|\s*`(?P<default>[^`]+)`\s*\|")


def _settings_problems(text: str) -> list[str]:
    """Compare the settings table with ``conf.SPECS``: keys and defaults."""
    shown = {m["key"]: m["default"] for m in map(_ROW.match, text.splitlines()) if m}
    problems = [f"LEASEJOBS[{key!r}] is missing" for key in SPECS if key not in shown]
    problems += [f"{key!r} is not in conf.SPECS" for key in shown.keys() - SPECS.keys()]
    for key, default in shown.items():
        # The cell is our own page, evaluated with nothing but timedelta in scope.
        if key in SPECS and eval(default, {"__builtins__": {}, "timedelta": timedelta}) != (
            SPECS[key].default
        ):
            problems.append(f"{key} shows {default}, conf.SPECS has {SPECS[key].default!r}")
    return problems


def _check_ids() -> list[str]:
    """Return every ``leasejobs.*`` id the app's registered checks can emit."""
    ids: set[str] = set()
    for check in check_registry.get_checks():
        if check.__module__ == "django_leasejobs.checks":
            ids.update(re.findall(r"leasejobs\.[EW]\d{3}", inspect.getsource(check)))
    return sorted(ids)


def _fields() -> list[str]:
    """Return every model column the concepts page must describe."""
    return [
        f"`{field.name}`"
        for model in (Run, Step)
        for field in model._meta.concrete_fields
        if field.name != "id"
    ]


def _missing(needles: list[str], what: str) -> Callable[[str], list[str]]:
    return lambda text: [f"{what} {needle} is missing" for needle in needles if needle not in text]


def check_reference_pages(app: Sphinx) -> None:
    """Warn when a hand-written page has fallen behind the code."""
    pages: dict[str, Callable[[str], list[str]]] = {
        "reference/settings.md": _settings_problems,
        "reference/checks.md": _missing(_check_ids(), "check id"),
        "reference/failure-codes.md": _missing(
            [f"`{code}`" for code in FailureCode.values], "failure code"
        ),
        "concepts.md": _missing(_fields(), "model field"),
    }
    for page, problems_in in pages.items():
        for problem in problems_in((DOCS / page).read_text(encoding="utf-8")):
            logger.warning(
                "%s (keep this page in sync with the code)",
                problem,
                location=page.removesuffix(".md"),
            )


def setup(app: Sphinx) -> None:
    app.connect("builder-inited", check_reference_pages)
