"""Settings: the one place ``settings.LEASEJOBS`` is read.

A site sets only what it changes::

    LEASEJOBS = {"LEASE": timedelta(minutes=2), "REDACT_ERRORS": True}

Each value is read on first use and kept: the hot paths read a few per
start and per pass. ``override_settings`` (and pytest-django's ``settings``)
send ``setting_changed``, which drops what was kept, so tests see their
values. Validation lives in :mod:`django_leasejobs.checks`, which uses
:data:`SPECS` below, so ``manage.py check`` names a bad key before anything runs.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, Generic, TypeVar, cast, overload

from django.conf import settings as django_settings
from django.core.signals import setting_changed

from .policy import MAX_DELAY

__all__ = ["SPECS", "Setting", "conf"]

T = TypeVar("T")


class Setting(Generic[T]):
    """One ``LEASEJOBS`` key: its default, what a valid value looks like, and what it does.

    Declared once, as an attribute of :class:`_Conf`: its name is the key,
    its type parameter what ``conf.<KEY>`` reads as, and :data:`SPECS` -- what
    ``manage.py check`` and the settings reference are written from -- is
    collected from the declarations, so the two can never disagree.
    """

    def __init__(self, default: T, valid: Callable[[Any], bool], expect: str, doc: str) -> None:
        self.default = default
        self.valid = valid
        self.expect = expect
        self.doc = doc
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, conf: None, owner: type) -> Setting[T]: ...

    @overload
    def __get__(self, conf: _Conf, owner: type) -> T: ...

    def __get__(self, conf: _Conf | None, owner: type) -> Setting[T] | T:
        if conf is None:
            return self
        user = getattr(django_settings, "LEASEJOBS", None) or {}
        value = user.get(self.name, self.default) if isinstance(user, dict) else self.default
        conf.__dict__[self.name] = value  # the next read is a plain attribute
        return cast(T, value)


def _positive_int(value: Any) -> bool:
    return type(value) is int and value > 0


def _duration(minimum: timedelta) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, timedelta) and minimum <= value <= MAX_DELAY


def _between(least: timedelta, most: timedelta) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, timedelta) and least <= value <= most


def _bool(value: Any) -> bool:
    return type(value) is bool


def _dotted_path(value: Any) -> bool:
    return isinstance(value, str) and "." in value


def _header_token(value: Any) -> bool:
    """A token a request header carries unchanged: printable ASCII, nothing for a server to trim."""
    return (
        isinstance(value, str)
        and len(value) >= 16
        and all(" " <= char <= "~" for char in value)
        and value == value.strip(" ")
    )


class _Conf:
    """Typed, lazy view of ``settings.LEASEJOBS`` with the defaults filled in.

    Each key is read on first use and kept (in the instance, which a
    :class:`Setting` then stands behind), until :meth:`reload`.
    """

    LEASE = Setting[timedelta](
        timedelta(minutes=5),
        _duration(timedelta(milliseconds=100)),
        "a timedelta from 100 ms to ten years",
        "How long a claim holds a run when its job sets no ``lease``. Renewed at "
        "every step boundary (L7), so it bounds the time between two steps, not a pass.",
    )

    DRIVE_LIMIT = Setting[int](
        50, _positive_int, "a positive int", "Runs one drive takes on (D1, D2)."
    )

    SCAN_MAX = Setting[int](
        500,
        _positive_int,
        "a positive int",
        "Due rows one drive reads while looking for runs of jobs it registers (D1).",
    )

    MAX_PASSES = Setting[int](1, _positive_int, "a positive int", "Passes per run per drive (D3).")
    CONCURRENCY = Setting[int](
        1,
        _positive_int,
        "a positive int",
        "Passes one drive (or one rundueJobs process) runs at once, each on a thread and a "
        "database connection of its own (W5). 1: one after another, on the drive's own "
        "connection. A process opens at most this many connections plus two.",
    )

    RETENTION = Setting[timedelta](
        timedelta(days=30),
        _duration(timedelta(0)),
        "a timedelta from 0 to ten years",
        "How long finished runs and missed-run records are kept (S7).",
    )

    HAND_RUNS_PER_HOUR = Setting[int](
        20, _positive_int, "a positive int", "Runs started by hand per job per hour (S5)."
    )

    MISSED_GRACE = Setting[timedelta](
        timedelta(minutes=5),
        _duration(timedelta(0)),
        "a timedelta from 0 to ten years",
        "How late a due time may fire before it counts as missed (S3).",
    )

    STALL_AFTER = Setting[timedelta](
        timedelta(minutes=15),
        _duration(timedelta(seconds=1)),
        "a timedelta from one second to ten years",
        "A live run older than this reads as stalled, unless its job says otherwise (S6).",
    )

    REDACT_ERRORS = Setting[bool](
        False,
        _bool,
        "True or False",
        "Keep only the exception type in ``last_error``; a message can carry a secret (§10).",
    )

    ERROR_MAX_LENGTH = Setting[int](
        2000,
        _positive_int,
        "a positive int",
        "Characters of an error message kept in ``last_error``; the rest is cut.",
    )

    VALUE_MAX_BYTES = Setting[int](
        4 * 1024 * 1024,
        _positive_int,
        "a positive int",
        "The most bytes of JSON one stored value (payload, cursor, counters, a step "
        "result) may take; a larger one is refused with its path (R2). Keep it under "
        "half the database's own statement limit (MariaDB's ``max_allowed_packet``, "
        "16 MiB by default).",
    )

    ORPHAN_AFTER = Setting[timedelta](
        timedelta(days=7),
        _duration(timedelta(minutes=1)),
        "a timedelta from one minute to ten years",
        "A schedule whose job no drive has registered for this long reads as orphaned "
        "(S6), and retention disables it (S1).",
    )

    NOTIFY = Setting[bool](
        True,
        _bool,
        "True or False",
        "On PostgreSQL, announce every write that makes a run due sooner with NOTIFY, so "
        "idle --loop workers wake at once instead of at their next poll (W2).",
    )

    PREPARE = Setting[bool | None](
        None,
        lambda value: value is None or type(value) is bool,
        "None, True or False",
        "On PostgreSQL with psycopg 3, send start()'s insert and a pass's compare-and-set "
        "statements as prepared statements, planned once per connection (§13). None (the "
        "default): outside transactions, on aliases without DISABLE_SERVER_SIDE_CURSORS, and "
        "off for an alias in this process once a pooler loses one; True: always; False: never "
        "(behind a transaction-pooling PgBouncer older than 1.21 or without "
        "max_prepared_statements, prepared statements do not survive a change of server).",
    )

    LISTEN_DATABASE = Setting[str | None](
        None,
        lambda value: value is None or (isinstance(value, str) and bool(value)),
        "None or a database alias",
        "The alias of the connection a --loop worker LISTENs on; None for the runs' own. "
        "Point it at a direct connection past a transaction-pooling PgBouncer (W2).",
    )

    STATS = Setting[bool](
        True,
        _bool,
        "True or False",
        "Count each pass per (minute, job, queue, outcome) in the worker process and flush the "
        "counts to the database as increments, for the overview and the metrics (O1).",
    )

    STATS_EVERY = Setting[timedelta](
        timedelta(seconds=10),
        _between(timedelta(seconds=1), timedelta(hours=1)),
        "a timedelta from one second to one hour",
        "How often, at most, a worker process writes its pass statistics; an idle worker "
        "writes its last figures within this time, and every worker when it exits (O1).",
    )

    STATS_RETENTION = Setting[timedelta](
        timedelta(days=30),
        _duration(timedelta(hours=1)),
        "a timedelta from one hour to ten years",
        "How long pass statistics are kept; housekeeping deletes older rows in batches (O1).",
    )

    METRICS_TOKEN = Setting[str | None](
        None,
        lambda value: value is None or _header_token(value),
        "None or a str of at least 16 printable ASCII characters, no space at either end",
        "A bearer token that also admits a scrape of the metrics view, besides a user with "
        "leasejobs.view_run; None for none (O2). A WSGI server hands a header over as "
        "latin-1 text and trims its ends, so any other token could never match.",
    )

    CLOCK = Setting[str](
        "django_leasejobs.clock.DatabaseClock",
        _dotted_path,
        "a dotted path to a Clock class",
        "Where lease times come from (L1). Tests swap in "
        "``django_leasejobs.clock.FrozenClock``; production keeps the database's clock.",
    )

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"LEASEJOBS has no setting {name!r}")

    def reload(self) -> None:
        """Forget every value read, so the next read sees the settings as they are now."""
        self.__dict__.clear()


#: Every key ``LEASEJOBS`` understands, in the order declared. The settings
#: reference in the docs is written from this table, and checked against it.
SPECS: dict[str, Setting[Any]] = {
    name: value for name, value in vars(_Conf).items() if isinstance(value, Setting)
}

#: Unguarded: a setting read on two threads at once is kept twice, the same value.
conf = _Conf()


def _settings_changed(*, setting: str, **kwargs: Any) -> None:
    if setting == "LEASEJOBS":
        conf.reload()


setting_changed.connect(_settings_changed)
