"""Flow control options: ``Limit`` and ``Rate`` (SPEC §14, rules C1-C5).

``@job(limit=Limit(concurrency=2, rate=Rate(5, per=timedelta(seconds=2)),
key=lambda payload: payload["account"]))``: at most two passes of the job
per account at once, begun at least 0.4 s apart. Both are enforced by the
database when a pass begins (:mod:`.store.limits`), so they hold across every
worker and machine. This module holds only the options and their checks, so
``@job`` can validate them at import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .codec import storable_text
from .exceptions import InvalidKey
from .policy import MAX_DELAY

__all__ = ["KEY_LENGTH", "Limit", "Rate"]

#: A limit key is at most this long (C1), as an instance is.
KEY_LENGTH = 200


@dataclass(frozen=True, slots=True)
class Rate:
    """At most *n* passes begun per *per* (C3): evenly spaced, ``per / n`` apart."""

    n: int
    per: timedelta

    def problem(self) -> str | None:
        if type(self.n) is not int or self.n < 1:
            return f"rate n must be an int >= 1, got {self.n!r}"
        if not isinstance(self.per, timedelta) or self.per <= timedelta(0):
            return f"rate per must be a positive timedelta, got {self.per!r}"
        if self.per > MAX_DELAY:
            return f"rate per must be at most {MAX_DELAY.days} days, got {self.per}"
        return None

    @property
    def interval(self) -> timedelta:
        """How far apart two begins must be: the emission interval."""
        return self.per / self.n


@dataclass(frozen=True, slots=True)
class Limit:
    """A job's flow control: *concurrency* passes at once and/or a *rate*, per *key*.

    Parameters
    ----------
    concurrency:
        At most this many passes of the job (per key) begun and unexpired at
        once (C2).
    rate:
        A :class:`Rate`: passes (per key) begin at least ``per / n`` apart (C3).
    key:
        ``None`` for one limit for the whole job, or ``key(payload) -> str``
        (at most 200 characters), evaluated once when the run starts (C1):
        each key gets its own limits.
    """

    concurrency: int | None = None
    rate: Rate | None = None
    key: Callable[[Any], str] | None = None

    def problem(self) -> str | None:
        """What is wrong with this limit, or ``None`` (checked by ``@job``, naming it)."""
        if self.concurrency is None and self.rate is None:
            return "a Limit needs concurrency, rate or both"
        if self.concurrency is not None and (
            type(self.concurrency) is not int or self.concurrency < 1
        ):
            return f"limit concurrency must be an int >= 1, got {self.concurrency!r}"
        if self.rate is not None:
            if not isinstance(self.rate, Rate):
                return f"limit rate must be a django_leasejobs.Rate, got {self.rate!r}"
            if problem := self.rate.problem():
                return f"limit {problem}"
        if self.key is not None and not callable(self.key):
            return f"limit key must be a callable key(payload) -> str, got {self.key!r}"
        return None

    def key_of(self, payload: Any, name: str = "limit key") -> str | None:
        """C1: the key a run with *payload* is limited under (``None``: the job's own).

        Raises :class:`~django_leasejobs.InvalidKey` (a ``ValueError``) when
        the key function raises -- ``SystemExit`` and every other
        ``BaseException`` included (§11) -- or returns anything but a
        non-empty str of at most 200 storable characters, so the start writes
        nothing. ``KeyboardInterrupt`` alone goes through as it is: Ctrl-C
        still stops the caller, and nothing has been written when it does.
        """
        if self.key is None:
            return None
        try:
            value = self.key(payload)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            raise InvalidKey(
                name, ..., f"could not be computed: the key function raised {type(exc).__name__}"
            ) from exc
        if not isinstance(value, str) or not 0 < len(value) <= KEY_LENGTH:
            raise InvalidKey(
                name,
                value,
                f"the key function must return a non-empty str of at most {KEY_LENGTH} characters",
            )
        if "\x00" in value or storable_text(value) != value:
            raise InvalidKey(name, value, "holds a NUL or a lone surrogate")
        return value
