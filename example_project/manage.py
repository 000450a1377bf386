#!/usr/bin/env python
"""Run Django's management commands for the django-leasejobs example project."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    try:
        import django_leasejobs  # noqa: F401
    except ImportError:
        # A plain checkout, without `pip install -e ..`: use the package that
        # sits next to this folder. Appended, not prepended, so it can never
        # shadow anything else on the path.
        sys.path.append(str(Path(__file__).resolve().parent.parent))
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
