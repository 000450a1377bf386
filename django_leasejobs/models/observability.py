"""What operators and monitoring read about the work as a whole (SPEC §16, W6).

:class:`PassStat` holds the pass statistics each worker process flushes (O1):
one row per (minute, job, queue, outcome), whose figures only ever grow by
increments, so that many processes flushing at once never lose a count.
:class:`PassStatHalfHour` holds the same figures per half-hour, written by
the same flush (O4: the day and week windows read 48 and 336 half-hours of
rows, not 1 440 and 10 080 minutes of them).
:class:`PausedQueue` is one row per paused queue (W6): while it exists, no
worker begins a pass of that queue's runs.
"""

from __future__ import annotations

import bisect

from django.db import models
from django.utils.translation import gettext_lazy as _

from django_leasejobs.fields import KeyField
from django_leasejobs.routing import QUEUE_LENGTH
from django_leasejobs.states import PassOutcome

from .runs import JOB_NAME_LENGTH
from .schedules import ACTOR_LENGTH, NOTE_LENGTH

__all__ = ["BUCKETS", "BUCKET_FIELDS", "PassStat", "PassStatHalfHour", "PausedQueue", "Tally"]

#: O1's duration histogram: the upper bound of each bucket, in seconds (a pass of
#: exactly a bound counts in that bucket, as Prometheus's ``le`` does). A pass
#: longer than the last bound counts only in ``count``: the ``+Inf`` bucket.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
#: The column of each bucket: the passes that took more than the bound before it,
#: up to its own (not cumulative, so that a flush adds to each by increment).
BUCKET_FIELDS = tuple(f"le_{index:02}" for index in range(len(BUCKETS)))


class Tally:
    """The passes of one key counted in memory: a :class:`PassFigures` row's figures, to add.

    Here, beside the buckets it counts in, so that both the counting
    (:mod:`django_leasejobs.stats`) and the flush (:mod:`django_leasejobs.store.stats`)
    import it from below.
    """

    __slots__ = ("buckets", "count", "longest", "total")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.longest = 0.0
        self.buckets = [0] * len(BUCKETS)

    def add(self, seconds: float, count: int = 1) -> None:
        self.count += count
        self.total += seconds
        self.longest = max(self.longest, seconds)
        index = bisect.bisect_left(BUCKETS, seconds)
        if index < len(BUCKETS):
            self.buckets[index] += count

    def merge(self, other: Tally) -> None:
        self.count += other.count
        self.total += other.total
        self.longest = max(self.longest, other.longest)
        self.buckets = [a + b for a, b in zip(self.buckets, other.buckets, strict=True)]


class PassFigures(models.Model):
    """The figures of one statistics row (O1): passes, their times and their histogram.

    What :class:`PassStat` and :class:`PassStatHalfHour` have in common: the
    columns a flush adds to, and what the windows read and test
    (:func:`~django_leasejobs.figures.coarse.readable`).
    """

    job = KeyField(_("job"), max_length=JOB_NAME_LENGTH)
    queue = KeyField(_("queue"), max_length=QUEUE_LENGTH)
    outcome = models.CharField(
        _("outcome"), max_length=max(len(value) for value in PassOutcome.values)
    )
    count = models.BigIntegerField(_("passes"), default=0)
    total_seconds = models.FloatField(_("total seconds"), default=0.0)
    max_seconds = models.FloatField(_("longest, seconds"), default=0.0)
    le_00 = models.BigIntegerField(default=0)
    le_01 = models.BigIntegerField(default=0)
    le_02 = models.BigIntegerField(default=0)
    le_03 = models.BigIntegerField(default=0)
    le_04 = models.BigIntegerField(default=0)
    le_05 = models.BigIntegerField(default=0)
    le_06 = models.BigIntegerField(default=0)
    le_07 = models.BigIntegerField(default=0)
    le_08 = models.BigIntegerField(default=0)
    le_09 = models.BigIntegerField(default=0)
    le_10 = models.BigIntegerField(default=0)
    le_11 = models.BigIntegerField(default=0)
    le_12 = models.BigIntegerField(default=0)
    le_13 = models.BigIntegerField(default=0)

    class Meta:
        abstract = True

    @property
    def buckets(self) -> list[int]:
        """The passes in each bucket of :data:`BUCKETS`, then those past the last bound."""
        counts = [int(getattr(self, name)) for name in BUCKET_FIELDS]
        return [*counts, max(0, int(self.count) - sum(counts))]


class PassStat(PassFigures):
    """Passes of one job, queue and outcome within one minute, from every process (O1)."""

    minute = models.DateTimeField(_("minute"), help_text=_("The minute the passes ended in (UTC)."))

    class Meta:
        verbose_name = _("pass statistic")
        verbose_name_plural = _("pass statistics")
        constraints = [
            # What a flush's increments land on: one row per key, from any process.
            models.UniqueConstraint(
                fields=["minute", "job", "queue", "outcome"], name="leasejobs_passstat_key"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.minute:%Y-%m-%d %H:%M} {self.job} {self.queue} {self.outcome}: {self.count}"


class PassStatHalfHour(PassFigures):
    """The passes of one job, queue and outcome within one half-hour (O1, O4).

    The sum of the :class:`PassStat` minutes of its half-hour (``:00`` to
    ``:29``, ``:30`` to ``:59`` UTC), added to by the same flush in the same
    transaction, so the two never disagree about what was flushed. What the
    overview's day and week windows read; pruned with the minutes (O1's
    ``STATS_RETENTION``).
    """

    half_hour = models.DateTimeField(
        _("half-hour"), help_text=_("The start of the half-hour the passes ended in (UTC).")
    )

    class Meta:
        verbose_name = _("pass statistic per half-hour")
        verbose_name_plural = _("pass statistics per half-hour")
        constraints = [
            models.UniqueConstraint(
                fields=["half_hour", "job", "queue", "outcome"],
                name="leasejobs_passstathalfhour_key",
            ),
        ]

    def __str__(self) -> str:
        return (
            f"{self.half_hour:%Y-%m-%d %H:%M} {self.job} {self.queue} {self.outcome}: {self.count}"
        )


class PausedQueue(models.Model):
    """A queue no worker begins a pass of while this row exists (W6)."""

    queue = KeyField(_("queue"), max_length=QUEUE_LENGTH, unique=True)
    paused_by = models.CharField(_("paused by"), max_length=ACTOR_LENGTH, blank=True, default="")
    paused_at = models.DateTimeField(_("paused at"))
    note = models.CharField(_("note"), max_length=NOTE_LENGTH, blank=True, default="")

    class Meta:
        verbose_name = _("paused queue")
        verbose_name_plural = _("paused queues")

    def __str__(self) -> str:
        return f"{self.queue} (paused by {self.paused_by or '-'})"
