"""A full key's other due runs, held back in one statement without a claim (SPEC C4, C3, §13).

Once a pass of a key is throttled, the key's other runs in the drive's
snapshot would be too: claiming each only to let it go costs three
statements a run. The drive steps over them (:mod:`..full_keys`) and, at
its end, holds them back here, unclaimed, in one ``UPDATE`` per key:

* refused a slot (C2), all of them until about when one frees
  (:func:`throttle_unclaimed`);
* refused by the rate (C3), each until the begin the rate will give it --
  one rate interval apart, after the key's runs already held back, which
  one read finds (:func:`space_unclaimed`). So each falls due alone, when
  it may begin, and a begin does not move the rest of the backlog again:
  held back all at one time, a backlog of 600 runs was rewritten at every
  begin (2 400 row updates a second for a rate of 5).

Either moves a run only while it is due, unclaimed and not a takeover (a
begun lease), so a run another worker holds, or one whose pass died, is
left as it is. C5's re-judging reads the spacing back
(:func:`spaced_too_far`): which runs a looser rate would not hold so long.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Case, DateTimeField, Max, Q, Subquery, Value, When

from django_leasejobs.clock import get_clock, plus
from django_leasejobs.limits import Rate
from django_leasejobs.states import Throttle

from .base import alias, conflicts_retried, now, runs

__all__ = [
    "SPACING_MARGIN",
    "due_again",
    "last_held",
    "space_unclaimed",
    "spaced",
    "spaced_too_far",
    "throttle_unclaimed",
]

#: How much more than a rate's interval apart its held-back runs fall due (at most a
#: twentieth of the interval). Each begin comes a few milliseconds after the rate allows
#: it -- the worker's wake-up, the round trip -- and a strict rate counts its next interval
#: from that begin (C3), so runs spaced exactly one interval apart would each fall due a
#: little earlier than the rate allows, until it refused every one of them once: two
#: more writes a begin (§13).
SPACING_MARGIN = timedelta(milliseconds=10)


def spaced(interval: timedelta) -> timedelta:
    """How far apart a rate's held-back runs fall due: its interval, and a margin (C3)."""
    return interval + min(SPACING_MARGIN, interval / 20)


def due_again(at: Any, wait: timedelta, until: datetime | None) -> Any:
    """When a throttled run is due again: when its rate allows (*until*), or after *wait*."""
    return plus(at, wait) if until is None else until


@conflicts_retried
def throttle_unclaimed(
    run_ids: list[str], which: Throttle, until: datetime | None, wait: timedelta
) -> int:
    """C4: runs of a key this drive just found at its limit, due again with the one throttled.

    Returns how many moved.
    """
    at = now()
    return (
        runs()
        .claimable(at, took_over=False)
        .filter(pk__in=run_ids)
        .update(next_attempt_at=due_again(at, wait, until), throttled_by=which, updated_at=at)
    )


def held(job: str, key: str) -> Any:
    """The runs of (*job*, *key*) its rate holds back, waiting, unclaimed (C3)."""
    mine = Q(limit_key=key) if key else Q(limit_key__isnull=True) | Q(limit_key="")
    return runs().throttled().filter(mine, job=job, throttled_by=Throttle.RATE)


def last_held(job: str, key: str) -> Any:
    """The due time of the last of (*job*, *key*)'s runs held back by its rate, as a subquery.

    Read in the same statement as a refusal's next allowed begin
    (:mod:`.limits`): a pass its rate refuses waits behind the key's runs
    already spaced (:func:`space_unclaimed`) -- falling due at the rate's next
    begin, it would fall due with the next of them, and one of the two
    would be refused again, and so on down the backlog (§13).
    """
    return Subquery(held(job, key).order_by("-next_attempt_at").values("next_attempt_at")[:1])


@conflicts_retried
def space_unclaimed(
    run_ids: list[str], job: str, key: str, until: datetime, every: timedelta
) -> int:
    """C3, C4: runs of a key its rate refused, in due order, each a rate interval after the last.

    *until* is the rate's next allowed begin, where the throttled run waits
    already; *every* its interval, which :func:`spaced` widens by a margin.
    The first of *run_ids* is due that far
    after the latest of *until* and the key's runs held back before (by this
    drive's throttled passes or an earlier drive), so that no two fall due
    together. One read of that latest time, among the waiting runs (the live
    ones, not the history), and one ``UPDATE``. Returns how many moved.
    """
    earlier = held(job, key).exclude(pk__in=run_ids)
    latest = earlier.aggregate(latest=Max("next_attempt_at"))["latest"]
    after = until if latest is None else max(until, latest)
    apart = spaced(every)
    due = [When(pk=pk, then=Value(after + apart * n)) for n, pk in enumerate(run_ids, 1)]
    at = now()
    return (
        runs()
        .claimable(at, took_over=False)
        .filter(pk__in=run_ids)
        .update(
            next_attempt_at=Case(*due, output_field=DateTimeField()),
            throttled_by=Throttle.RATE,
            updated_at=at,
        )
    )


def spaced_too_far(jobs: tuple[str, ...], rate: Rate) -> list[str]:
    """Runs held back by a rate further ahead than *rate* would hold them (C3, C5).

    A key's held-back runs are spaced one interval apart (:func:`space_unclaimed`,
    with :func:`spaced`'s margin), so under *rate* the k-th of them, in due
    order, waits at most k + 1 spacings from now: the rate's next begin, at
    most one interval ahead, then one spacing each. One later than that was
    spaced by a slower rule.
    Read once per process and per changed limit, over the waiting runs only.
    """
    at, apart = get_clock().now(alias()), spaced(rate.interval)
    held = (
        runs()
        .waiting()
        .filter(job__in=jobs, throttled_by=Throttle.RATE)
        .order_by("job", "limit_key", "next_attempt_at", "pk")
        .values_list("pk", "job", "limit_key", "next_attempt_at")
    )
    too_far: list[str] = []
    position, key = 0, None
    for pk, job, limit_key, due in held:
        position = position + 1 if (job, limit_key or "") == key else 1
        key = (job, limit_key or "")
        if due is not None and due > at + apart * (position + 1):
            too_far.append(pk)
    return too_far
