"""Retry policies (R4, R7): exhaustion and jittered, capped exponential backoff."""

from __future__ import annotations

import random
from datetime import timedelta

from django_leasejobs import Retry


def test_delay_doubles_from_base_and_is_capped():
    policy = Retry(base=timedelta(seconds=1), cap=timedelta(seconds=10), jitter=0)
    assert [policy.delay(n).total_seconds() for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]


def test_jitter_only_shortens_by_at_most_its_share():
    policy = Retry(base=timedelta(seconds=10), cap=timedelta(seconds=10), jitter=0.2)
    rng = random.Random(7)
    delays = [policy.delay(1, rng).total_seconds() for _ in range(200)]
    assert all(8 <= d <= 10 for d in delays)
    assert len(set(delays)) > 100


def test_huge_attempt_counts_do_not_overflow():
    assert Retry(jitter=0).delay(10_000) == timedelta(minutes=5)


def test_exhausted():
    policy = Retry(max_attempts=3)
    assert not policy.exhausted(2)
    assert policy.exhausted(3)


def test_problem_names_the_bad_field():
    assert Retry().problem() is None
    assert "max_attempts" in Retry(max_attempts=0).problem()
    assert "base" in Retry(base=timedelta(seconds=-1)).problem()
    assert "cap" in Retry(base=timedelta(seconds=9), cap=timedelta(seconds=1)).problem()
    assert "jitter" in Retry(jitter=1.5).problem()
