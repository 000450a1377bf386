"""System checks (``manage.py check``): ids ``leasejobs.E0xx`` / ``W0xx``, and
``E1xx`` for the tasks backend (SPEC §9).

Job definitions are validated when they are registered (an invalid one stops
the import with the job named); these checks cover the site's settings.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig, apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.db import connections
from django.utils.module_loading import import_string

from . import compat
from .conf import SPECS, conf
from .tasks import LeaseJobsBackend
from .tasks.aliases import our_aliases

__all__ = [
    "check_clock",
    "check_databases",
    "check_listen_database",
    "check_settings",
    "check_task_backends",
    "check_time_zone",
]


@register()
def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    user = getattr(settings, "LEASEJOBS", {})
    if not isinstance(user, dict):
        return [
            Error(
                f"LEASEJOBS must be a dict, got {type(user).__name__}.",
                hint="For example: LEASEJOBS = {'LEASE': timedelta(minutes=5)}",
                id="leasejobs.E001",
            )
        ]
    messages: list[CheckMessage] = []
    for key, value in user.items():
        spec = SPECS.get(key)
        if spec is None:
            close = difflib.get_close_matches(str(key), SPECS, n=1)
            messages.append(
                Warning(
                    f"LEASEJOBS[{key!r}] is not a setting django-leasejobs knows; it is ignored.",
                    hint=f"Did you mean {close[0]!r}?"
                    if close
                    else f"Known keys: {', '.join(SPECS)}.",
                    id="leasejobs.W001",
                )
            )
        elif not spec.valid(value):
            messages.append(
                Error(
                    f"LEASEJOBS[{key!r}] must be {spec.expect}, got {value!r}.",
                    hint=spec.doc,
                    id="leasejobs.E002",
                )
            )
    return messages


@register()
def check_clock(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    path = conf.CLOCK
    if not SPECS["CLOCK"].valid(path):
        return []  # Reported by check_settings.
    try:
        clock_class = import_string(path)
    except ImportError as exc:
        return [Error(f"LEASEJOBS['CLOCK'] cannot be imported: {exc}.", id="leasejobs.E003")]
    if not all(callable(getattr(clock_class, name, None)) for name in ("now", "now_expr")):
        return [
            Error(
                f"LEASEJOBS['CLOCK'] = {path!r} is not a clock.",
                hint="A clock class has now_expr() and now() methods; see django_leasejobs.clock.",
                id="leasejobs.E003",
            )
        ]
    return []


@register()
def check_time_zone(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    if settings.USE_TZ:
        return []
    return [
        Error(
            "django-leasejobs needs USE_TZ = True.",
            hint=(
                "Lease times come from the database's clock in UTC (SPEC L1) and schedules "
                "compare them with aware datetimes; naive local times would shift both."
            ),
            id="leasejobs.E004",
        )
    ]


@register()
def check_databases(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    messages: list[CheckMessage] = []
    for alias in kwargs.get("databases") or settings.DATABASES:
        connection = connections[alias]
        if connection.vendor != "sqlite":
            continue
        options = connection.settings_dict.get("OPTIONS", {})
        if str(options.get("transaction_mode", "")).upper() != "IMMEDIATE":
            messages.append(
                Warning(
                    f"SQLite database {alias!r} does not use IMMEDIATE transactions.",
                    hint=(
                        "Concurrent drives (cron overlapping a worker, say) can then fail with "
                        "'database is locked'. Set OPTIONS = {'transaction_mode': 'IMMEDIATE', "
                        "'timeout': 20, 'init_command': 'PRAGMA journal_mode=WAL;'}."
                    ),
                    id="leasejobs.W002",
                )
            )
    return messages


@register()
def check_listen_database(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    listen_on = conf.LISTEN_DATABASE
    if not SPECS["LISTEN_DATABASE"].valid(listen_on) or listen_on is None:
        return []  # None: the runs' own connection; a bad type is check_settings's.
    if listen_on not in settings.DATABASES:
        return [
            Error(
                f"LEASEJOBS['LISTEN_DATABASE'] = {listen_on!r} is not in DATABASES.",
                hint=f"Name one of: {', '.join(settings.DATABASES)}.",
                id="leasejobs.E005",
            )
        ]
    if connections[listen_on].vendor != "postgresql":
        return [
            Warning(
                f"LEASEJOBS['LISTEN_DATABASE'] = {listen_on!r} is not a PostgreSQL database; "
                "workers will poll.",
                hint="LISTEN/NOTIFY is PostgreSQL's; elsewhere --loop workers poll every "
                "--interval (W2).",
                id="leasejobs.W003",
            )
        ]
    return []


@register()
def check_task_backends(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Each ``TASKS`` alias on our backend, where the task framework would not check it.

    Django 6 checks every task backend itself, as does the backport once
    ``django_tasks`` is installed; without the backport, or without its app,
    nobody would, so ``leasejobs.E1xx`` still reach ``manage.py check``.
    """
    if compat.FRAMEWORK == "django.tasks" or (
        compat.AVAILABLE and apps.is_installed("django_tasks")
    ):
        return []
    messages: list[CheckMessage] = []
    for alias, params in our_aliases():
        messages.extend(LeaseJobsBackend(alias, params).check())
    return messages
