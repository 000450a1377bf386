"""Settings for ``benchmarks/admin_list.py``: the benchmark settings plus a working admin.

``benchmarks.settings`` stays minimal for the worker benchmarks (no sessions,
no templates); the admin needs its apps, a session, messages and a URLconf.
"""

from __future__ import annotations

from benchmarks.settings import *  # noqa: F403 - extend, do not repeat, the database set-up
from benchmarks.settings import INSTALLED_APPS as BASE_APPS

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # A real site has it, and the admin's {% static %} then goes through its storage.
    "django.contrib.staticfiles",
    *(
        app
        for app in BASE_APPS
        if app not in ("django.contrib.auth", "django.contrib.contenttypes")
    ),
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

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        # With DEBUG off Django wraps these loaders in the cached loader, as in production.
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

ROOT_URLCONF = "benchmarks.urls"
STATIC_URL = "/static/"
# django.test.Client sends Host: testserver; setup_test_environment() would add it,
# but also instruments template rendering, which would skew the timings.
ALLOWED_HOSTS = ["testserver"]
