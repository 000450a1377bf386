"""Due times of a cron expression in a time zone: pure functions, no database.

croniter does the calendar; this module adds the two things a scheduler needs
on top of it:

* **DST.** Due times are computed in the schedule's zone. When clocks go
  forward, a due time inside the skipped hour moves to the first minute after
  the gap (croniter's behaviour: ``0 2 * * *`` runs at 03:00 that day). When
  clocks go back, croniter yields a wall time of the repeated hour twice;
  like Vixie cron we keep the first and drop the repeat, so a daily job runs
  once on both change days. Jobs that run several times an hour still run in
  both copies of the repeated hour (their wall times differ in between).
* **Bounded work.** A minutely job missed for a year has 525 600 due times.
  Listing them one by one costs croniter about 20 s, so :func:`newest` walks
  backwards from now and :func:`count` counts whole days from croniter's
  expanded fields, iterating only the days at the edges and DST days.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

__all__ = ["count", "is_due", "iter_due", "newest", "next_due", "oldest"]

_DAY = timedelta(days=1)


def _local(moment: datetime, zone: ZoneInfo) -> datetime:
    return moment.astimezone(zone)


def _walk(
    expression: str, zone: ZoneInfo, start: datetime, *, backwards: bool
) -> Iterator[datetime]:
    """Due times strictly after (or before) *start*, as aware UTC, repeated wall times dropped."""
    cursor = croniter(expression, _local(start, zone))
    step = cursor.get_prev if backwards else cursor.get_next
    previous_wall = _local(start, zone).replace(tzinfo=None)
    while True:
        moment: datetime = step(datetime)
        wall = moment.replace(tzinfo=None)
        if wall == previous_wall:
            continue  # the second copy of a wall time in the hour the clocks went back
        previous_wall = wall
        yield moment.astimezone(UTC)


def iter_due(expression: str, zone: ZoneInfo, after: datetime) -> Iterator[datetime]:
    """Due times strictly after *after*, oldest first, forever."""
    return _walk(expression, zone, after, backwards=False)


def next_due(expression: str, zone: ZoneInfo, after: datetime) -> datetime:
    """The first due time strictly after *after*."""
    return next(iter_due(expression, zone, after))


def is_due(expression: str, zone: ZoneInfo, moment: datetime) -> bool:
    """Whether *moment* is one of the expression's due times (on the cron grid)."""
    return next_due(expression, zone, moment - _tiny()) == moment


def oldest(
    expression: str, zone: ZoneInfo, first: datetime, until: datetime, limit: int
) -> tuple[list[datetime], bool]:
    """Due times from *first* (inclusive) to *until* (inclusive), oldest first, at most *limit*.

    Returns the due times and whether more remain after them up to *until*.
    """
    times: list[datetime] = []
    for moment in iter_due(expression, zone, first - timedelta(microseconds=1)):
        if moment > until:
            return times, False
        if len(times) == limit:
            return times, True
        times.append(moment)
    raise AssertionError("unreachable")  # pragma: no cover - iter_due never ends


def newest(
    expression: str, zone: ZoneInfo, first: datetime, until: datetime, limit: int
) -> tuple[list[datetime], int]:
    """The newest *limit* due times in [*first*, *until*], oldest first, and how many older ones."""
    times: list[datetime] = []
    for moment in _walk(expression, zone, until + timedelta(microseconds=1), backwards=True):
        if moment < first or len(times) == limit:
            break
        times.append(moment)
    times.reverse()
    if len(times) < limit or not times:
        return times, 0
    return times, count(expression, zone, first, times[0] - timedelta(microseconds=1))


def count(expression: str, zone: ZoneInfo, first: datetime, until: datetime) -> int:
    """How many due times fall in [*first*, *until*], without listing a long span one by one."""
    if until < first:
        return 0
    if until - first <= 3 * _DAY or expression.startswith("@"):
        return _count_by_walking(expression, zone, first, until)
    fields = croniter(expression).expanded

    def size(index: int, full: int) -> int:
        if index >= len(fields):
            return 1
        return full if fields[index] == ["*"] else len(fields[index])

    per_day = size(0, 60) * size(1, 24) * size(5, 60)
    # Whole local days strictly inside the span are counted by day; the edges by walking.
    start_day = _local(first, zone).replace(hour=0, minute=0, second=0, microsecond=0) + _DAY
    end_day = _local(until, zone).replace(hour=0, minute=0, second=0, microsecond=0)
    total = _count_by_walking(expression, zone, first, _day_start(start_day, zone) - _tiny())
    total += _count_by_walking(expression, zone, _day_start(end_day, zone), until)
    dom, month, dow = expression.split()[2:5]
    days = croniter(f"0 0 {dom} {month} {dow}", start_day - timedelta(seconds=1))
    while True:
        day: datetime = days.get_next(datetime)
        if day >= end_day:
            return total
        day_begins, day_ends = _day_start(day, zone), _day_start(day + _DAY, zone)
        if day_ends - day_begins != _DAY:  # a DST change day: walk it
            total += _count_by_walking(expression, zone, day_begins, day_ends - _tiny())
        else:
            total += per_day


def _tiny() -> timedelta:
    return timedelta(microseconds=1)


def _day_start(day: datetime, zone: ZoneInfo) -> datetime:
    """Local midnight of *day*'s date in *zone*, as aware UTC."""
    midnight = datetime(day.year, day.month, day.day, tzinfo=zone)
    return midnight.astimezone(UTC)


def _count_by_walking(expression: str, zone: ZoneInfo, first: datetime, until: datetime) -> int:
    for total, moment in enumerate(iter_due(expression, zone, first - _tiny())):
        if moment > until:
            return total
    raise AssertionError("unreachable")  # pragma: no cover
