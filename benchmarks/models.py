"""The benchmarks' own table: the rows ``bench_walk.py`` walks (``migrate --run-syncdb``)."""

from __future__ import annotations

from django.db import models


class WalkRow(models.Model):
    """One row of the backfill; ``touched`` counts the batches that updated it."""

    touched = models.IntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.pk} touched {self.touched}"
