"""Recipe (c), with ``@task(schedule=...)``: Celery beat entries become scheduled tasks.

Needs scheduled tasks (SPEC §9 revision 4), which land with issue 28's
other branches: until then ``@task`` refuses ``schedule=`` and this module
does not import. Only ``tests/test_docs_switching.py``'s post-merge test
imports it.
"""

from __future__ import annotations

from django_leasejobs.compat import task  # in your code: from django.tasks import task

from . import shop


# [after]
# shop/tasks.py, listed in TASKS["default"]["OPTIONS"]["SCHEDULED_TASKS"]
@task(schedule="30 7 * * mon-fri", timezone="Europe/London")
def send_digest() -> None:
    shop.send_digest()


@task(schedule="*/15 * * * *", missed="skip")
def refresh_rates() -> None:
    shop.refresh_rates()
