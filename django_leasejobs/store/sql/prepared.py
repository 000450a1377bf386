"""Prepared statements for the fixed statements of a start and of a pass (``PREPARE``, §13).

Django sends every query with client-side binding and turns psycopg's
prepared statements off, so that a transaction-pooling PgBouncer can hand
each transaction to another server. The price, for the few statements a
start or a pass sends again and again, is that PostgreSQL parses and plans
each one every time: about a third of what a ``start()`` costs the server.

With ``LEASEJOBS["PREPARE"]`` on, those statements -- and only those -- go
through a server-binding cursor that asks psycopg to prepare them, so each is
planned once per connection. The site's own queries are not touched: they
keep Django's client-side cursor, and psycopg's own counting stays off for
them: it is switched on only while one of ours runs. SQLite, MariaDB and
psycopg 2 ignore the setting.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from django_leasejobs.conf import conf

__all__ = ["cursor", "prepares"]

#: While one of ours runs: psycopg prepares a query once it has seen it this often.
#: Ours ask to be prepared at once; this only switches psycopg's bookkeeping on.
_NEVER = 2**62


def prepares(connection: BaseDatabaseWrapper) -> bool:
    """Whether our fixed statements are prepared on *connection*."""
    if not conf.PREPARE or connection.vendor != "postgresql":
        return False
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return bool(is_psycopg3)


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
    connection.validate_thread_sharing()
    if connection.queries_logged:
        found.logged = True
        return connection.make_debug_cursor(found)
    return connection.make_cursor(found)


@functools.cache
def _preparing_cursor_class() -> type:
    """Built on first use: it needs psycopg, which only a PostgreSQL site has."""
    from django.db.backends.postgresql.base import ServerBindingCursor
    from django.db.backends.postgresql.psycopg_any import ClientCursor

    base: Any = ServerBindingCursor

    class Preparing(base):  # type: ignore[misc]
        """Django's server-binding cursor, asking psycopg to prepare what it runs."""

        #: Whether Django logs what this cursor runs (``queries_logged``).
        logged = False

        def execute(self, query: Any, params: Any = None, **options: Any) -> Any:
            # With Django's threshold (None) psycopg would refuse to prepare,
            # and would keep no record of what it prepared; restored after,
            # so it never counts the site's queries (nor holds their text).
            raw = self.connection
            threshold = raw.prepare_threshold
            if threshold is None:
                raw.prepare_threshold = _NEVER
            try:
                done = super().execute(query, params, **{**options, "prepare": True})
            finally:
                raw.prepare_threshold = threshold
            if self.logged:
                # psycopg keeps no text of a prepared query, and Django's query
                # log (DEBUG, CaptureQueriesContext) reads it from here: the
                # text Django's own cursor would have sent, values in place.
                self._query = _Sent(ClientCursor(raw).mogrify(query, params).encode())
            return done

    return Preparing


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
