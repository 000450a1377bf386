"""The benchmarks' own tables: the rows ``bench_walk.py`` walks, and its floor's progress row
(``migrate --run-syncdb``)."""

from __future__ import annotations

from django.db import models


class WalkRow(models.Model):
    """One row of the backfill; ``touched`` counts the batches that updated it."""

    touched = models.IntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.pk} touched {self.touched}"


class WalkProgress(models.Model):
    """``bench_walk.py``'s floor: a hand-written resumable walk's progress row.

    ``done`` is the last batch recorded as done (a step's record), ``cursor`` the
    key the walk goes on from (its commit); both are written only while ``owner``
    holds the row until ``expires`` -- the fence and lease a second worker needs.
    """

    owner = models.CharField(max_length=36)
    expires = models.DateTimeField()
    done = models.BigIntegerField(null=True)
    cursor = models.BigIntegerField(null=True)

    def __str__(self) -> str:
        return f"walk at {self.cursor} held by {self.owner}"
