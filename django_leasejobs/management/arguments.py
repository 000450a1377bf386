"""Argument types shared by the commands: each refuses a bad value with a sentence.

``argparse`` calls them with the raw text; a ``ValueError`` from ``float()``
would read "invalid float value", so each says what was expected instead.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from django_leasejobs.exceptions import JobNotRegistered
from django_leasejobs.registry import get_job
from django_leasejobs.routing import queue_problem

__all__ = ["quantity", "queue_name", "registered_job", "whole_number"]


def whole_number(low: int = 1, high: int | None = None) -> Callable[[str], int]:
    """A whole number from *low* (to *high*, if given)."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
        if number < low or (high is not None and number > high):
            limits = f"from {low} to {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"{value!r} must be {limits}")
        return number

    return parse


def quantity(unit: str, *, most: float, zero_ok: bool) -> Callable[[str], float]:
    """A number of *unit* (fractions allowed) above 0 -- or from 0 -- and at most *most*."""

    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a number of {unit}") from None
        # Written so that NaN and infinity fail too.
        if not ((0 <= number) if zero_ok else (0 < number)) or not number <= most:
            low = "from 0" if zero_ok else "more than 0"
            raise argparse.ArgumentTypeError(f"{value!r} must be {low} and at most {most:g} {unit}")
        return number

    return parse


def registered_job(value: str) -> str:
    """A job registered in this process: an unknown ``--job`` is refused before anything runs."""
    try:
        return get_job(value).name
    except JobNotRegistered as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def queue_name(value: str) -> str:
    """A queue name as a run stores it: 1-100 characters (W4)."""
    if problem := queue_problem("--queue", value):
        raise argparse.ArgumentTypeError(problem)
    return value
