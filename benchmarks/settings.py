"""Settings for the benchmark project. The database comes from ``DATABASE_URL``
(django-environ), SQLite in memory by default; ``benchmarks/drain.py`` sets it
for every process it starts.
"""

from __future__ import annotations

import environ

env = environ.Env()

SECRET_KEY = "benchmarks-only-not-secret"
DEBUG = False  # DEBUG = True would keep every query in memory and skew the timings.
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS: list[str] = []
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# "benchmarks" is an app only so that its jobs module is autodiscovered.
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django_leasejobs",
    "benchmarks",
]

DATABASES = {"default": env.db_url("DATABASE_URL", default="sqlite:///:memory:")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # What the README recommends for a SQLite site running several drives at
    # once: IMMEDIATE transactions take the write lock up front (no upgrade
    # deadlocks), WAL lets readers run beside the writer.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
elif DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
    DATABASES["default"].setdefault("OPTIONS", {})["charset"] = "utf8mb4"
# drain.py --conn-max-age: Django's default 0 (a new connection per drive, and per pass
# thread per drive with --concurrency), or "none" for persistent ones, as peer-bench runs.
_cma = env.str("LEASEJOBS_BENCH_CONN_MAX_AGE", default="0")
DATABASES["default"]["CONN_MAX_AGE"] = None if _cma == "none" else int(_cma)

# drain.py --no-stats measures what the pass statistics (SPEC §16 O1) cost a drain;
# drain.py/starts.py --prepare and --no-prepare set PREPARE (docs/reference/settings.md),
# which is otherwise left at the package's default.
LEASEJOBS = {"STATS": env.bool("LEASEJOBS_BENCH_STATS", default=True)}
if "LEASEJOBS_BENCH_PREPARE" in env:
    LEASEJOBS["PREPARE"] = env.bool("LEASEJOBS_BENCH_PREPARE")
