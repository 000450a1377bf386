"""Recipe (b): a django-q2 ``Schedule`` row becomes a scheduled job."""

from __future__ import annotations

from django_leasejobs import job

from . import shop


# [after]
# shop/jobs.py
@job(
    "shop.daily_summary",
    schedule="0 7 * * 1-5",  # the same cron string
    timezone="Europe/London",  # django-q2 read it in settings.TIME_ZONE
    missed="catch_up_once",  # after an outage: run once, not once per missed morning
)
def daily_summary(p):
    shop.send_daily_summary()
    return p.done()
