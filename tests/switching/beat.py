"""Recipe (c), with ``@job``: Celery beat entries become scheduled jobs."""

from __future__ import annotations

from django_leasejobs import job

from . import shop


# [after]
# shop/jobs.py
@job("shop.digest", schedule="30 7 * * mon-fri", timezone="Europe/London")
def digest(p):
    shop.send_digest()
    return p.done()


@job("shop.rates", schedule="*/15 * * * *", missed="skip")  # stale rates are no use
def rates(p):
    shop.refresh_rates()
    return p.done()


@job("shop.sessions", schedule="0 */6 * * *", missed="skip")
def sessions(p):
    shop.clean_up_sessions()
    return p.done()
