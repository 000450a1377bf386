"""``@task(backoff=fn)``: the task decides each retry's delay (SPEC §9, revision 4).

Django's proposal (new-features #142) gives ``backoff`` the attempt's
exception and the task's result after it -- its ``errors`` and ``attempts``
counting the attempt that just failed -- and takes back the next attempt's
delay in seconds, or ``None`` to give up. The verdict is the pass's own: the
pass that failed asks (:func:`judge`, from the task job's handler) and the
settle that follows (R4) reads the answer off the pass's
:class:`BackedOff` policy, made for that pass alone by
:meth:`~.options.TaskOptions.for_task`.

A ``backoff`` that raises, or answers anything but a number of seconds, a
``timedelta`` or ``None``, fails the run at once: its ``last_error`` is a
:class:`~django_leasejobs.exceptions.BackoffFailed` naming the task and what
went wrong, with the task's own exception as its cause. The drive goes on.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django_leasejobs.exceptions import BackoffFailed
from django_leasejobs.policy import MAX_DELAY, Retry

__all__ = ["BackedOff", "Backoff", "BackoffFailed", "delay_of"]

#: What ``@task(backoff=...)`` is: given the attempt's exception and the task's
#: result so far, the next attempt's delay -- seconds or a timedelta -- or ``None``.
Backoff = Callable[[BaseException, Any], object]


class _Answer:
    """What one pass's ``backoff`` answered: nothing yet, a delay, or give up."""

    __slots__ = ("asked", "delay")

    def __init__(self) -> None:
        self.asked = False
        self.delay: timedelta | None = None


@dataclass(frozen=True, slots=True)
class BackedOff(Retry):
    """A retry policy whose delay, and whether to retry at all, is the task's ``backoff``'s.

    One per pass: its answer is what this pass's ``backoff`` said. Until it
    is asked (a pass that failed before calling the task), it is the policy
    it was made from.
    """

    backoff: Backoff | None = field(default=None, compare=False)
    answer: _Answer = field(default_factory=_Answer, compare=False, repr=False)

    @classmethod
    def of(cls, retry: Retry, backoff: Backoff) -> BackedOff:
        return cls(retry.max_attempts, retry.base, retry.cap, retry.jitter, backoff)

    def exhausted(self, attempts: int) -> bool:
        given_up = self.answer.asked and self.answer.delay is None
        return given_up or Retry.exhausted(self, attempts)

    def delay(self, attempts: int, rng: random.Random | None = None) -> timedelta:
        if self.answer.asked and self.answer.delay is not None:
            return self.answer.delay
        return Retry.delay(self, attempts, rng)

    def judge(self, path: str, exc: BaseException, result: Any, attempts: int) -> None:
        """Ask ``backoff`` about failed attempt number *attempts*, if another is allowed.

        Raises :class:`~django_leasejobs.exceptions.BackoffFailed` (from *exc*)
        when it raises or answers nonsense; the pass then fails for good with
        that as its error.
        """
        if self.backoff is None or Retry.exhausted(self, attempts):
            return  # no attempt left to delay: the run fails with its own error
        self.answer.asked = True
        try:
            answer = self.backoff(exc, result)
        except Exception as raised:
            failure = BackoffFailed(
                f"task {path}: its backoff raised {type(raised).__qualname__}: {raised}"
            )
            raise failure from exc
        delay, problem = delay_of(answer)
        if problem:
            raise BackoffFailed(f"task {path}: its backoff {problem}") from exc
        self.answer.delay = delay


def delay_of(answer: object) -> tuple[timedelta | None, str | None]:
    """A ``backoff``'s *answer* as the next attempt's delay (``None``: give up), or the problem."""
    if answer is None:
        return None, None
    delay: object = answer
    if isinstance(answer, int | float) and not isinstance(answer, bool):
        in_range = math.isfinite(answer) and 0 <= answer <= MAX_DELAY.total_seconds()
        delay = timedelta(seconds=answer) if in_range else None
    if isinstance(delay, timedelta) and timedelta(0) <= delay <= MAX_DELAY:
        return delay, None
    return None, (
        f"returned {answer!r}; it must return a number of seconds or a timedelta, "
        f"from 0 to {MAX_DELAY.days} days, or None to give up"
    )
