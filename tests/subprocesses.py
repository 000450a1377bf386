"""Start real worker processes (``manage.py``-style commands) on the test database."""

from __future__ import annotations

import os
import subprocess
import sys

from django.db import connection


def command_env(**extra: str) -> dict[str, str]:
    """The environment for a child that must use the test database the parent created."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", **extra}
    env["LEASEJOBS_TEST_DB_NAME"] = str(connection.settings_dict["NAME"])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    return env


def django_command(*args: str, **popen) -> subprocess.Popen:
    """Start ``python -m django <args>`` against the test database."""
    return subprocess.Popen(
        [sys.executable, "-m", "django", *args],
        env=command_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def python(code: str) -> subprocess.Popen:
    """Start ``python -c <code>`` with Django set up on the test database."""
    prelude = "import django; django.setup()\n"
    return subprocess.Popen(
        [sys.executable, "-c", prelude + code],
        env=command_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def against_unreachable_database(url: str, *args: str) -> subprocess.CompletedProcess:
    """Run ``python -m django <args>`` with ``DATABASE_URL`` = *url*, a database it cannot reach."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "DATABASE_URL": url}
    env.pop("LEASEJOBS_TEST_DB_NAME", None)
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
