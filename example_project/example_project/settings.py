"""Settings for the django-leasejobs example project.

Everything a deployment changes comes from the environment (django-environ),
so the same file runs on a laptop and against a shared database::

    export DATABASE_URL=postgres://app@db.internal/app SECRET_KEY=... DEBUG=false
    python manage.py rundueJobs

The defaults are for local development only.
"""

from __future__ import annotations

from pathlib import Path

import environ

#: The folder that holds manage.py.
BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()

SECRET_KEY = env.str("SECRET_KEY", default="dev-only-insecure-key-do-not-deploy-leasejobs-example")
DEBUG = env.bool("DEBUG", default=True)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_leasejobs",
    "demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example_project.urls"
WSGI_APPLICATION = "example_project.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Cron's `rundueJobs`, a `rundueJobs --loop` worker and the admin all
    # write to one file. IMMEDIATE takes the write lock when a transaction
    # begins, so a second writer waits (up to `timeout` seconds) instead of
    # failing with "database is locked" halfway through. WAL lets readers go
    # on while one process writes; synchronous=NORMAL is safe with WAL, at the
    # cost of the last commits before a power cut. Options given in the URL
    # query string win.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        **DATABASES["default"].get("OPTIONS", {}),
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"

# django-leasejobs options. Every key, its default and what it governs: the
# settings reference, docs/reference/settings.md (the same table is SPECS in
# django_leasejobs/conf.py). Set only what you change, e.g.
# {"LEASE": timedelta(minutes=2)}; `manage.py check` validates the dict.
LEASEJOBS: dict[str, object] = {}

# Show the demo's and the library's INFO lines (a drive's report, the nightly
# summary) on the console, where cron mails them or a container collects them.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "{asctime} {levelname} {name}: {message}", "style": "{"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "django_leasejobs": {"handlers": ["console"], "level": "INFO"},
        "demo": {"handlers": ["console"], "level": "INFO"},
    },
}
