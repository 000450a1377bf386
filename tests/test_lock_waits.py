"""F11 on PostgreSQL: a side table's statements wait a moment for a lock, never setting the session.

``store/lock_waits.py`` bounds each transaction of the block with ``SET
LOCAL lock_timeout``: a session setting would stay, behind a
transaction-pooling PgBouncer, on a server connection the pooler hands to
another client next. The session is read here on the raw connection, past
Django's execute wrappers, between the block's statements.
"""

from __future__ import annotations

import threading

import pytest
from django.db import OperationalError, connection, connections, transaction

from django_leasejobs.models import Schedule
from django_leasejobs.store.lock_waits import lock_wait_bounded

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.elsewhere(
        connection.vendor != "postgresql", reason="SET LOCAL lock_timeout is PostgreSQL's"
    ),
]


def _setting(sql: str = "SELECT current_setting('lock_timeout')") -> str:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetchone()[0]


def _session_setting() -> str:
    """The session's own value, read on the raw connection in autocommit: no wrapper sees it."""
    return connection.connection.execute("SHOW lock_timeout").fetchone()[0]


def test_f11_each_statement_and_transaction_of_the_block_is_bounded():
    with lock_wait_bounded("default"):
        assert _setting() == "500ms"  # a statement in autocommit: a transaction of its own
        with transaction.atomic():
            Schedule.objects.count()
            assert _setting() == "500ms"
    assert _setting() == "0"


def test_f11_the_session_never_carries_the_bound_between_the_blocks_statements():
    """What a transaction pooler would hand the next client: the session as it was."""
    with lock_wait_bounded("default"):
        Schedule.objects.count()
        assert _session_setting() == "0"
        with transaction.atomic():
            Schedule.objects.count()
        assert _session_setting() == "0"
    assert _session_setting() == "0"


def test_f11_a_locked_side_table_is_given_up_on_not_waited_out():
    """Another client holds the schedules' table; the bounded read gives up instead of
    waiting for it (the locker lets go after 60 s only so that a failure cannot hang)."""
    locked, release = threading.Event(), threading.Event()

    def hold_the_table() -> None:
        other = connections.create_connection("default")
        try:
            with other.cursor() as cursor:
                cursor.execute("BEGIN")
                cursor.execute(f'LOCK TABLE "{Schedule._meta.db_table}" IN ACCESS EXCLUSIVE MODE')
                locked.set()
                release.wait(60)
                cursor.execute("ROLLBACK")
        finally:
            other.close()

    locker = threading.Thread(target=hold_the_table)
    locker.start()
    try:
        assert locked.wait(30), "the other client never locked the table"
        with pytest.raises(OperationalError, match="lock timeout"), lock_wait_bounded("default"):
            Schedule.objects.count()
        assert release.is_set() is False  # given up while the lock was still held
    finally:
        release.set()
        locker.join(60)
