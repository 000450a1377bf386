"""A jobs module with an invalid job: the site must refuse to start (SPEC §11)."""

from __future__ import annotations

from datetime import timedelta

from django_leasejobs import job


@job("tests.bad_lease", lease=timedelta(milliseconds=50))
def bad_lease(p):
    return p.done()
