"""The test project. The database comes from ``DATABASE_URL`` (django-environ),
SQLite by default:

    DATABASE_URL=postgres://root@127.0.0.1:5432/test pytest
    DATABASE_URL=mysql://root@127.0.0.1:3306/test pytest
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import django
import environ

BASE_DIR = Path(__file__).resolve().parent.parent
env = environ.Env()

SECRET_KEY = "tests-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "tests.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_leasejobs",
    "tests",
]
if django.VERSION < (6, 0):
    # Django 5.2: the task framework is the django-tasks backport (extra [tasks]).
    INSTALLED_APPS.append("django_tasks")

# Django tasks on this backend (SPEC §9); tests/tasks.py defines the tasks.
# Worker processes a test starts get their OPTIONS from LEASEJOBS_TEST_TASK_OPTIONS
# (JSON: RETRY as a dict, LEASE and TIMEOUT in seconds).
TASKS = {
    "default": {
        "BACKEND": "django_leasejobs.tasks.LeaseJobsBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": json.loads(os.environ.get("LEASEJOBS_TEST_TASK_OPTIONS", "{}")),
    },
}

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

STATIC_URL = "/static/"

# One test database per tox env, so envs can run side by side on one server.
_suffix = os.environ.get("TOX_ENV_NAME", "local").replace("-", "_").replace(".", "_")
_sqlite_file = BASE_DIR / ".tmp" / f"test_{_suffix}.sqlite3"

DATABASES = {"default": env.db_url("DATABASE_URL", default="sqlite:///:memory:")}
DATABASES["default"]["TEST"] = {"NAME": f"test_leasejobs_{_suffix}"}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A file, not :memory:, so worker processes spawned by the concurrency
    # tests open the same test database; WAL and IMMEDIATE transactions as
    # the README recommends for any SQLite site running several drives.
    _sqlite_file.parent.mkdir(exist_ok=True)
    DATABASES["default"]["TEST"] = {"NAME": str(_sqlite_file)}
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
elif DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
    DATABASES["default"].setdefault("OPTIONS", {})["charset"] = "utf8mb4"

# Child processes of the concurrency tests connect to the test database the
# parent created; they learn its name from this variable (tests/procs.py).
if os.environ.get("LEASEJOBS_TEST_DB_NAME"):
    DATABASES["default"]["NAME"] = os.environ["LEASEJOBS_TEST_DB_NAME"]

# Through a transaction-pooling PgBouncer (the py312-django61-pgbouncer env, SPEC §12):
# DATABASE_URL points at the pooler and LISTEN_DATABASE_URL at the same server directly,
# the second alias the deployment guide gives the W2 listener, past the pooler. It is a
# test MIRROR of the default alias: Django's test runner gives it the test database's
# name and creates nothing for it (tests/conftest.py: how that database is made and
# dropped through the pooler).
if os.environ.get("LISTEN_DATABASE_URL"):
    DATABASES["direct"] = env.db_url("LISTEN_DATABASE_URL")
    DATABASES["direct"]["NAME"] = DATABASES["default"]["NAME"]
    DATABASES["direct"]["TEST"] = {"MIRROR": "default"}

# The fault tests (tests/faults/) point a worker at their TCP proxy -- the same server on
# another port -- and give it the connection options the deployment guide names (F2):
# LEASEJOBS_TEST_DB_OPTIONS is JSON merged into OPTIONS.
if os.environ.get("LEASEJOBS_TEST_DB_PORT"):
    DATABASES["default"]["PORT"] = os.environ["LEASEJOBS_TEST_DB_PORT"]
if os.environ.get("LEASEJOBS_TEST_DB_OPTIONS"):
    DATABASES["default"]["OPTIONS"] = {
        **DATABASES["default"].get("OPTIONS", {}),
        **json.loads(os.environ["LEASEJOBS_TEST_DB_OPTIONS"]),
    }

# Tests log users in by the dozen; the default hasher's 1 000 000 rounds would
# cost a quarter of a second each time.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# The W2 fallback tests start workers that cannot hear their notifications:
# one listening on another database of the same server (NOTIFY is per
# database, as behind a transaction-pooling PgBouncer nothing comes back),
# one with NOTIFY turned off.
LEASEJOBS: dict[str, object] = {"LISTEN_DATABASE": "direct"} if "direct" in DATABASES else {}
_listen = os.environ.get("LEASEJOBS_TEST_LISTEN")
if _listen == "elsewhere":
    DATABASES["elsewhere"] = {**DATABASES["default"], "NAME": "postgres", "TEST": {}}
    LEASEJOBS = {"LISTEN_DATABASE": "elsewhere"}
elif _listen == "off":
    LEASEJOBS = {"NOTIFY": False}

# The whole suite once more with a start's and a pass's statements prepared (§13);
# "off" for a worker whose statements a fault proxy must see whole (F3: psycopg sends a
# statement to prepare in a round trip of its own, then only its name and values).
if os.environ.get("LEASEJOBS_TEST_PREPARE"):
    _prepare = os.environ["LEASEJOBS_TEST_PREPARE"] != "off"
    LEASEJOBS = {**LEASEJOBS, "PREPARE": _prepare}

# A second alias on the same database, as a read replica would be (SPEC §12): Django's test
# MIRROR points it at the test database; only tests/test_replicas.py routes reads to it
# (tests/routers.py), so every other test leaves it unused. A deep copy: a test that changes
# the default alias's OPTIONS leaves the replica's as they were.
DATABASES["replica"] = {**copy.deepcopy(DATABASES["default"]), "TEST": {"MIRROR": "default"}}
