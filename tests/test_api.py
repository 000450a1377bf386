"""SPEC §3: the public API is one list of names, each importable from the package."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import django_leasejobs


def test_every_public_name_imports():
    missing = [name for name in django_leasejobs.__all__ if not hasattr(django_leasejobs, name)]
    assert missing == []
    assert sorted(django_leasejobs.__all__) == django_leasejobs.__all__ == dir(django_leasejobs)


def test_the_spec_names_are_public():
    spec = {
        "job", "start", "run_due_jobs", "Pass", "PassResult", "Retry", "Defer", "DriveReport",
        "StartResult", "cancel", "retry", "release", "pause", "resume", "run_now",
    }  # fmt: skip
    assert spec <= set(django_leasejobs.__all__)


def test_the_package_imports_before_django_is_set_up():
    """``INSTALLED_APPS`` imports it first: no name may need the app registry at import."""
    code = "import django_leasejobs; print(django_leasejobs.Retry.__name__)"
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "Retry"


def test_a_name_that_is_not_public_is_an_attribute_error():
    module = importlib.import_module("django_leasejobs")
    with pytest.raises(AttributeError, match="not_a_name"):
        module.not_a_name  # noqa: B018
