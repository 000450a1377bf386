"""Prepared statements for the fixed statements of a start and of a pass (``PREPARE``, §13).

Django sends every query with client-side binding and turns psycopg's
prepared statements off, so that a transaction-pooling PgBouncer can hand
each transaction to another server. The price, for the few statements a
start or a pass sends again and again, is that PostgreSQL parses and plans
each one every time, and psycopg converts each one's text again: a fifth of
a one-worker drain, a third of two workers' (docs/performance.md).

So those statements -- and only those -- go through a server-binding cursor
that asks psycopg to prepare them, planned once per connection. The site's
own queries are not touched: they keep Django's client-side cursor, and
psycopg's own counting stays off for them: it is switched on only while one
of ours runs. SQLite, MariaDB and psycopg 2 ignore the setting.

``LEASEJOBS["PREPARE"]`` is ``None`` by default: prepared where it is safe
to be. Not for a database alias that sets ``DISABLE_SERVER_SIDE_CURSORS``
(what Django's documentation asks of a site behind a transaction-pooling
PgBouncer), and not inside a transaction -- the caller's ``start()`` in its
request, or a pass's own two-statement writes -- where a lost prepared
statement would spoil the transaction. Outside one, a statement that a
pooler lost (``prepared statement ... does not exist``, or a name some other
client already took on that server) ran nothing: it is sent again
unprepared, and the alias is not prepared again in this process (logged
once). ``True`` prepares them everywhere, ``False`` nowhere.

Behind such a pooler a lost statement must fail as unknown, never run as
another client's: psycopg names a connection's statements ``_pg3_0``,
``_pg3_1``... as every other connection does, so the server connection a
pooler hands over may hold another client's ``_pg3_0`` -- whose parameters
ours would be bound to (a real PgBouncer 1.18 showed it: "bind message
supplies 29 parameters, but prepared statement "_pg3_0" requires 5"; with a
matching count, the wrong statement would run). So a connection's names
start at a random number of its own (:func:`_own_names`).
"""

from __future__ import annotations

import functools
import logging
import secrets
import threading
from typing import Any, NamedTuple

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from django_leasejobs.conf import conf

__all__ = ["cursor", "prepares"]

logger = logging.getLogger("django_leasejobs")

#: While one of ours runs: psycopg prepares a query once it has seen it this often.
#: Ours ask to be prepared at once; this only switches psycopg's bookkeeping on.
_NEVER = 2**62


#: Aliases whose server lost a statement prepared on it: a pooler between (see above).
#: Only ever added to, once per alias and process, under :data:`_lost_lock`; read by
#: every pass thread without it (a set's membership test is one step).
_LOST: set[str] = set()
_lost_lock = threading.Lock()


def prepares(connection: BaseDatabaseWrapper) -> bool:
    """Whether our next fixed statement on *connection* is prepared."""
    setting = conf.PREPARE
    if setting is False or connection.vendor != "postgresql":
        return False
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    if not is_psycopg3:
        return False
    return setting is True or _automatic(connection)


def _automatic(connection: BaseDatabaseWrapper) -> bool:
    """``PREPARE = None``: outside a transaction, on an alias not known to be pooled."""
    return (
        connection.alias not in _LOST
        and not connection.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS")
        and not connection.in_atomic_block
        and connection.get_autocommit()
    )


def cursor(connection: BaseDatabaseWrapper) -> CursorWrapper:
    """A cursor for one of our fixed statements: Django's own, or one that prepares it.

    Either way it is wrapped as ``connection.cursor()`` wraps its cursor, so
    query logging, ``execute_wrappers`` and the database error translation
    see the statement as they see any other.
    """
    if not prepares(connection):
        return connection.cursor()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        found = _preparing_cursor_class()(connection.connection)
        _use_connection_timezone(connection, found)
    if conf.PREPARE is None:
        found.fallback = connection.alias  # outside a transaction: may be sent again
    connection.validate_thread_sharing()
    if connection.queries_logged:
        found.logged = True
        return connection.make_debug_cursor(found)
    return connection.make_cursor(found)


# functools.cache is thread-safe; a race builds the class twice, and keeps one.
@functools.cache
def _preparing_cursor_class() -> type:
    """Built on first use: it needs psycopg, which only a PostgreSQL site has."""
    from django.db.backends.postgresql.base import ServerBindingCursor
    from django.db.backends.postgresql.psycopg_any import ClientCursor
    from psycopg.errors import DuplicatePreparedStatement, InvalidSqlStatementName

    base: Any = ServerBindingCursor

    class Preparing(base):  # type: ignore[misc]
        """Django's server-binding cursor, asking psycopg to prepare what it runs."""

        #: Whether Django logs what this cursor runs (``queries_logged``).
        logged = False
        #: The alias to stop preparing on if a pooler lost the statement (``PREPARE = None``).
        fallback: str | None = None

        def execute(self, query: Any, params: Any = None, **options: Any) -> Any:
            try:
                done = self._prepared(query, params, options)
            except (InvalidSqlStatementName, DuplicatePreparedStatement) as exc:
                if self.fallback is None:
                    raise
                # Nothing ran, outside any transaction: the same statement, unprepared.
                _lost(self.fallback, exc)
                done = super().execute(query, params, **{**options, "prepare": False})
            if self.logged:
                # psycopg keeps no text of a prepared query, and Django's query
                # log (DEBUG, CaptureQueriesContext) reads it from here: the
                # text Django's own cursor would have sent, values in place.
                self._query = _Sent(ClientCursor(self.connection).mogrify(query, params).encode())
            return done

        def _prepared(self, query: Any, params: Any, options: dict[str, Any]) -> Any:
            # With Django's threshold (None) psycopg would refuse to prepare,
            # and would keep no record of what it prepared; restored after,
            # so it never counts the site's queries (nor holds their text).
            raw = self.connection
            _own_names(raw)
            threshold = raw.prepare_threshold
            if threshold is None:
                raw.prepare_threshold = _NEVER
            try:
                return super().execute(query, params, **{**options, "prepare": True})
            finally:
                raw.prepare_threshold = threshold

    return Preparing


def _own_names(raw: Any) -> None:
    """Have *raw* (a psycopg connection) name what it prepares as no other connection does.

    psycopg counts its statements' names from 0 on every connection
    (``_pg3_<n>``, from its prepare manager's counter, which it never resets);
    started at a random 62-bit number instead, the names of two connections
    never meet on one server connection, so through a pooler a statement is
    either the one this connection prepared or unknown (see the module's
    docstring). Done once, before the connection's first statement is prepared.
    """
    manager = raw._prepared
    if manager._prepared_idx == 0:
        manager._prepared_idx = secrets.randbits(62) | 1


def _lost(alias: str, exc: Exception) -> None:
    """A pooler lost a statement prepared on *alias*: none is prepared there again."""
    with _lost_lock:  # two threads may lose one at once: one warning
        first = alias not in _LOST
        _LOST.add(alias)
    if first:
        logger.warning(
            "Prepared statements do not survive on database %r (%s): a transaction-pooling "
            'PgBouncer before 1.21? They are off for it in this process; set LEASEJOBS["PREPARE"] '
            "= False, or DISABLE_SERVER_SIDE_CURSORS as Django asks behind such a pooler.",
            alias,
            type(exc).__name__,
        )


class _Sent(NamedTuple):
    """A statement's text as Django's query log reads it from a cursor (``_query.query``)."""

    query: bytes


def _use_connection_timezone(connection: BaseDatabaseWrapper, found: Any) -> None:
    """As Django's ``create_cursor()``: read times in the connection's zone."""
    from django.db.backends.postgresql.base import TIMESTAMPTZ_OID
    from django.db.backends.postgresql.psycopg_any import register_tzloader
    from psycopg.pq import Format

    loader = connection.connection.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)
    if connection.timezone != loader.timezone:
        register_tzloader(connection.timezone, found)
