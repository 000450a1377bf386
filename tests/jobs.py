"""Module-level jobs the tests drive (autodiscovered: ``tests`` is an installed app)."""

from __future__ import annotations

from datetime import timedelta

from django_leasejobs import Retry, job


@job("tests.noop")
def noop(p):
    return p.done()


@job("tests.walk", lease=timedelta(seconds=30), retry=Retry(max_attempts=3))
def walk(p):
    return p.done()


@job("tests.nightly", schedule="0 3 * * *", timezone="Europe/Paris", missed="catch_up_once")
def nightly(p):
    return p.done()


@job("tests.fragile", safe_to_repeat=False)
def fragile(p):
    return p.done()
