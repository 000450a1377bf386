"""Recipe (a): the code of a site on django-tasks-db, unchanged on this backend."""

from __future__ import annotations

from django_leasejobs.compat import task  # in your code: from django.tasks import task

from . import shop


# [code]
# shop/tasks.py
@task(queue_name="emails")
def send_welcome_email(user_id: int) -> str:
    return shop.send_welcome_email(user_id)


# shop/views.py
def sign_up(user_id: int) -> str:
    result = send_welcome_email.enqueue(user_id)
    return result.id
