"""tests.settings plus an app whose jobs module registers an invalid job."""

from __future__ import annotations

from tests.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "tests.badjob_app"]  # noqa: F405
