"""How an exception becomes ``last_error`` text, and what a database error means.

A message can quote a secret (a token in a URL, a password in a DSN), so with
``REDACT_ERRORS`` only the exception's type is kept; otherwise the type and
message, cut to ``ERROR_MAX_LENGTH``. Database URLs with credentials are
masked either way, and the text is made storable (no NUL, no lone surrogate),
because it is written to the row it describes (SPEC §10, §12).

A database error is one of three things to the drive, and each is handled
differently: a *conflict* (a deadlock or serialization failure) lost a race
and is simply tried again; a *lost connection* ends the drive; anything else
is about one row and is contained to that row (D4, R9).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import DatabaseError, connections

from .codec import storable_text
from .conf import conf
from .exceptions import DatabaseFull

__all__ = [
    "FULL_NOTE",
    "READ_ERRORS",
    "connection_lost",
    "describe",
    "drop_lost_connections",
    "is_conflict",
    "is_full",
    "mask_urls",
    "one_line",
    "refused_when_full",
    "unreadable_reason",
    "why_unreadable",
]

#: What reading a stored row that cannot be handed back raises, by backend and column (§12).
READ_ERRORS = (DatabaseError, ValueError, TypeError, OverflowError)

# The password may hold "/" (it is cut at the last "@" before the host); the
# user name may not, or "https://host/path@x" would read as credentials.
_URL_CREDENTIALS = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s:@]*(:[^\s@]*)?@")

#: MySQL/MariaDB error numbers and PostgreSQL SQLSTATEs of a lost race.
_MYSQL_CONFLICTS = frozenset({1213})  # ER_LOCK_DEADLOCK
_POSTGRES_CONFLICTS = frozenset({"40001", "40P01"})  # serialization_failure, deadlock_detected
#: SQLite's words when the write lock stayed taken past the busy timeout (SQLITE_BUSY).
_SQLITE_LOCKED = ("database is locked", "database table is locked")

#: F8: what each backend says when the database cannot grow. SQLite's SQLITE_FULL
#: ("database or disk is full": its ``max_page_count`` or the disk); MariaDB's
#: ER_RECORD_FILE_FULL ("The table ... is full") and ER_DISK_FULL; PostgreSQL's
#: ``disk_full`` ("could not extend file ...: No space left on device").
_SQLITE_FULL = 13
_MYSQL_FULL = frozenset({1114, 1021})
_POSTGRES_FULL = frozenset({"53100"})
#: How a drive reports a write the full database refused: one line, no path (F8).
FULL_NOTE = (
    "the database is full (it cannot grow): this pass's writes were refused; "
    "the run is retried or taken over once space returns"
)

#: SQLite's words for a text column that is not valid UTF-8 (its message quotes the text).
_UNDECODABLE = re.compile(r"Could not decode to UTF-8 column '([^']*)'")


def mask_urls(text: str) -> str:
    """Replace ``user:password@`` in any URL in *text* with ``***@``."""
    return _URL_CREDENTIALS.sub(r"\1***@", text)


def describe(exc: BaseException, prefix: str = "") -> str:
    """Return the stored form of *exc*: ``Type: message`` (or just ``Type``)."""
    name = type(exc).__qualname__
    if conf.REDACT_ERRORS:
        text = name
    elif is_full(exc) and not isinstance(exc, DatabaseFull):
        # F8: one line, and no file path of the driver's (PostgreSQL names the file).
        text = f"{name}: {FULL_NOTE}"
    else:
        message = str(exc).strip()
        text = f"{name}: {message}" if message else name
    text = storable_text(mask_urls(prefix + text))
    limit = conf.ERROR_MAX_LENGTH
    return text if len(text) <= limit else text[: limit - 1] + "…"


def one_line(exc: BaseException) -> str:
    """*exc* described on one line, for a command's stderr or a log line (D5)."""
    return " ".join(describe(exc).split())


def is_conflict(exc: BaseException) -> bool:
    """Whether *exc* is a deadlock or serialization failure: worth running again (SPEC §12).

    On SQLite, "database is locked" too: another connection held the write
    lock past the ``timeout`` option's wait -- several passes of one worker
    (W5), a cron drive beside a worker -- and the write simply waits again.
    """
    cause = exc.__cause__ if isinstance(exc, DatabaseError) else None
    if cause is None:
        return False
    if getattr(cause, "sqlstate", None) in _POSTGRES_CONFLICTS:
        return True
    if type(cause).__module__ == "sqlite3":
        return str(cause).startswith(_SQLITE_LOCKED)
    args: tuple[Any, ...] = getattr(cause, "args", ()) or (None,)
    return args[0] in _MYSQL_CONFLICTS


def is_full(exc: BaseException) -> bool:
    """Whether *exc* (or an error it was raised from) is the database refusing to grow (F8)."""
    seen: set[int] = set()
    error: BaseException | None = exc
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if {getattr(error, "sqlstate", None), getattr(error, "pgcode", None)} & _POSTGRES_FULL:
            return True
        if type(error).__module__ == "sqlite3" and (
            getattr(error, "sqlite_errorcode", None) == _SQLITE_FULL
            or "database or disk is full" in str(error)
        ):
            return True
        if type(error).__module__.startswith("MySQLdb"):
            args: tuple[Any, ...] = getattr(error, "args", ()) or (None,)
            if args[0] in _MYSQL_FULL:
                return True
        error = error.__cause__ or error.__context__
    return False


@contextmanager
def refused_when_full(job: str) -> Iterator[None]:
    """Turn the database's refusal to grow, while a run of *job* begins, into
    :class:`~django_leasejobs.exceptions.DatabaseFull` (F8, §11): a clear error
    naming the job, raised from the driver's. Every write of a start is one
    statement or inside one transaction, so nothing of it was written."""
    try:
        yield
    except DatabaseError as exc:
        if is_full(exc) and not isinstance(exc, DatabaseFull):
            raise DatabaseFull(job) from exc
        raise


def connection_lost(using: str) -> bool:
    """Whether the connection *using* is gone, after a database error on it.

    Asked rather than guessed from the error's class: MySQL reports a deadlock
    and SQLite an undecodable column as ``OperationalError``, the same class
    as a server that went away, yet the connection is fine after both.
    """
    connection = connections[using]
    try:
        if connection.connection is None:
            connection.ensure_connection()  # Closed, not necessarily lost: try to reopen.
            return False
        return not connection.is_usable()
    except Exception:  # whatever the driver raised, there is no connection
        return True


def drop_lost_connections() -> None:
    """Close this thread's connections an error left unusable: the next use opens anew (F4).

    Django reopens a connection only once it is closed; one the database
    ended (``pg_terminate_backend``, ``KILL``, a restart) would otherwise
    fail every statement of this thread from then on. Only a connection that
    has seen an error is asked whether it still works, so this costs nothing
    while all is well -- unlike ``close_old_connections``, which also closes
    a sound connection past ``CONN_MAX_AGE``.
    """
    for connection in connections.all(initialized_only=True):
        if connection.connection is None or not connection.errors_occurred:
            continue
        if connection.in_atomic_block:
            continue  # the transaction's owner decides; Django refuses a reconnect inside it
        if connection.is_usable():
            connection.errors_occurred = False  # as Django's own check does: asked once
            continue
        try:
            connection.close()
        except DatabaseError:
            connection.connection = None  # gone already: nothing to close


def unreadable_reason(exc: BaseException) -> str:
    """Why a stored row could not be read back, without quoting what it holds.

    SQLite's message for a column that is not UTF-8 quotes the column's text,
    which may be a payload; logs and ``last_error`` never carry payloads.
    """
    if match := _UNDECODABLE.search(str(exc)):
        return f"the stored column {match.group(1)!r} is not valid UTF-8"
    if isinstance(exc, ValueError | TypeError | OverflowError):
        return f"a stored value does not parse ({type(exc).__name__}: {exc})"
    return f"the stored row cannot be read ({describe(exc)})"


def why_unreadable(exc: BaseException, using: str) -> str:
    """Why a row could not be read back on *using* -- unless the connection is lost.

    For *exc*, one of :data:`READ_ERRORS` raised while reading a row: a lost
    connection is no fault of the row and ends the drive, so *exc* is raised
    again; so is a full database (F8), which refused the write the read came
    with (a claim's ``RETURNING``): the drive reports it in one line and the
    run is claimed again once space returns. Anything else costs only that
    row (R9, §12).
    """
    if isinstance(exc, DatabaseError) and (is_full(exc) or connection_lost(using)):
        raise exc  # F8: a write the full database refused is no fault of the row either
    return unreadable_reason(exc)
