"""SPEC §10: what an exception becomes in ``last_error`` and on a command's stderr."""

from __future__ import annotations

import pytest

from django_leasejobs.errors import describe, mask_urls, one_line


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("postgres://app:hunter2@db/site", "postgres://***@db/site"),
        ("postgres://app:hun/ter2@db:5432/site", "postgres://***@db:5432/site"),
        ("mysql://root@127.0.0.1/test", "mysql://***@127.0.0.1/test"),
        ("see https://example.com/a@b for more", "see https://example.com/a@b for more"),
        ("two: redis://:pw@a and amqp://u:p/q@b", "two: redis://***@a and amqp://***@b"),
    ],
)
def test_s10_credentials_in_urls_are_masked(text, masked):
    assert mask_urls(text) == masked


def test_s10_a_stored_error_masks_urls_even_unredacted(settings):
    settings.LEASEJOBS = {"REDACT_ERRORS": False}
    error = ConnectionError("could not reach postgres://app:hun/ter2@db/site")
    assert describe(error) == "ConnectionError: could not reach postgres://***@db/site"


def test_d5_one_line_joins_a_multi_line_message():
    error = RuntimeError('connection failed: refused\n\tIs the server running on "db"?\n')
    assert (
        one_line(error) == 'RuntimeError: connection failed: refused Is the server running on "db"?'
    )
