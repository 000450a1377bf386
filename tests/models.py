"""Side tables the tests' jobs write to, to observe what really ran."""

from __future__ import annotations

from django.db import models


class Effect(models.Model):
    """One real execution of a step body (a side effect the test can count)."""

    run_id = models.CharField(max_length=26)
    name = models.CharField(max_length=200)
    pid = models.IntegerField()

    def __str__(self) -> str:
        return f"{self.run_id}:{self.name}"


class PassLog(models.Model):
    """One handler invocation: who ran it and when, on the machine's monotonic clock."""

    run_id = models.CharField(max_length=26)
    pid = models.IntegerField()
    started_ns = models.BigIntegerField()
    ended_ns = models.BigIntegerField()

    def __str__(self) -> str:
        return f"{self.run_id} by {self.pid}"


class Begun(models.Model):
    """One pass's BEGIN, as the database stamped it (``lease_began_at``): W6's test reads
    when each pass of a queue began against when the queue was paused, on one clock."""

    run_id = models.CharField(max_length=26)
    began_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.run_id} began {self.began_at:%H:%M:%S.%f}"


class Walked(models.Model):
    """A row ``p.walk`` visits, by an integer key; ``touched`` counts the batches that did it."""

    touched = models.IntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.pk} touched {self.touched}"


class WalkedByName(models.Model):
    """The same, keyed by text (a ``CharField`` primary key)."""

    name = models.CharField(max_length=40, primary_key=True)
    touched = models.IntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.pk} touched {self.touched}"


class WalkedByUUID(models.Model):
    """The same, keyed by a UUID: not a JSON value, so its cursor is text."""

    id = models.UUIDField(primary_key=True)
    touched = models.IntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.pk} touched {self.touched}"


class Contact(models.Model):
    """The contacts table of the backfill how-to (docs/howto/backfills.md)."""

    email = models.CharField(max_length=254)

    def __str__(self) -> str:
        return self.email


class Subscriber(models.Model):
    """A site's own table, for the backfill recipe of ``docs/howto/switching.md``."""

    email = models.CharField(max_length=200)

    def __str__(self) -> str:
        return self.email
