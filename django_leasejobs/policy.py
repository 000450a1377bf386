"""Retry policies: how many failed passes (or step attempts) a run may take,
and how long it waits between them (SPEC R4, R7)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import timedelta

__all__ = ["MAX_DELAY", "Retry", "delay_problem"]

#: The longest any wait may be: a retry back-off, a ``Defer``, a lease. Every
#: due time is now plus a wait, and a time past year 9999 is refused by SQLite
#: and MariaDB and unreadable once PostgreSQL has stored it (SPEC §11).
MAX_DELAY = timedelta(days=3653)


def delay_problem(name: str, value: object, *, positive: bool = False) -> str | None:
    """Return what is wrong with *value* as a wait called *name*, or ``None``."""
    floor = "positive" if positive else "non-negative"
    if not isinstance(value, timedelta) or value < timedelta(0) or (positive and not value):
        return f"{name} must be a {floor} timedelta, got {value!r}"
    if value > MAX_DELAY:
        return f"{name} must be at most {MAX_DELAY.days} days (about ten years), got {value}"
    return None


@dataclass(frozen=True, slots=True)
class Retry:
    """A retry policy.

    Parameters
    ----------
    max_attempts:
        Failed attempts allowed before giving up; ``1`` means "never retry".
    base:
        The wait after the first failure; it doubles per consecutive failure.
    cap:
        The longest wait.
    jitter:
        The share of each wait that is random, from 0 (none) to 1. With the
        default 0.2 a 10 s wait becomes somewhere between 8 and 10 s, so runs
        that failed together do not all come back together.
    """

    max_attempts: int = 5
    base: timedelta = timedelta(seconds=1)
    cap: timedelta = timedelta(minutes=5)
    jitter: float = 0.2

    def problem(self) -> str | None:
        """Return what is wrong with this policy, or ``None``.

        Checked where the policy is used (``@job``, ``Pass.step``) rather than
        here, so the error can name the job it belongs to.
        """
        if type(self.max_attempts) is not int or self.max_attempts < 1:
            return f"retry max_attempts must be an int >= 1, got {self.max_attempts!r}"
        for name in ("base", "cap"):
            if problem := delay_problem(f"retry {name}", getattr(self, name)):
                return problem
        if self.cap < self.base:
            return f"retry cap ({self.cap}) is shorter than its base ({self.base})"
        if isinstance(self.jitter, bool) or not isinstance(self.jitter, int | float):
            return f"retry jitter must be a number from 0 to 1, got {self.jitter!r}"
        if not 0 <= self.jitter <= 1:
            return f"retry jitter must be from 0 to 1, got {self.jitter!r}"
        return None

    def exhausted(self, attempts: int) -> bool:
        """Return whether *attempts* failed attempts use up this policy."""
        return attempts >= self.max_attempts

    def delay(self, attempts: int, rng: random.Random | None = None) -> timedelta:
        """Return the wait after the *attempts*-th consecutive failure (1-based)."""
        exponent = min(max(0, attempts - 1), 64)  # 2**64 s already dwarfs any cap
        ceiling = min(self.cap.total_seconds(), self.base.total_seconds() * 2.0**exponent)
        share = (rng or random).random() * self.jitter
        return timedelta(seconds=ceiling * (1 - share))
