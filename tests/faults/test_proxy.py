"""The fault proxy does what the fault tests rely on (tests/faults/proxy.py), on the real server.

Each test opens its own driver connection through the proxy (not Django's:
the proxy's faults must not touch the test's own connection).
"""

from __future__ import annotations

import time

import pytest
from django.db import connection

from tests.faults.proxy import FaultProxy
from tests.utils import over_a_network_only

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.faults, over_a_network_only]


def connect(port: int, timeout: int = 3):
    """A driver connection through the proxy, waiting at most *timeout* s on a dead network."""
    settings = connection.settings_dict
    if connection.vendor == "postgresql":
        import psycopg

        return psycopg.connect(
            host="127.0.0.1", port=port, user=settings["USER"], dbname=settings["NAME"],
            password=settings["PASSWORD"] or None, connect_timeout=timeout,
            tcp_user_timeout=timeout * 1000, keepalives_idle=1, keepalives_interval=1,
            keepalives_count=timeout,
        )  # fmt: skip
    import MySQLdb

    return MySQLdb.connect(
        host="127.0.0.1", port=port, user=settings["USER"], database=settings["NAME"],
        password=settings["PASSWORD"] or "", connect_timeout=timeout, read_timeout=timeout,
        write_timeout=timeout,
    )  # fmt: skip


@pytest.fixture
def table():
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE fault_probe (n integer)")
    yield "fault_probe"
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE fault_probe")


def rows() -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT n FROM fault_probe ORDER BY n")
        return [n for (n,) in cursor.fetchall()]


def test_the_proxy_cuts_after_the_reply_so_the_commit_applies_and_the_client_never_hears(table):
    """cut_after_reply: the server committed; the client got an error, not the reply (F3)."""
    with FaultProxy(connection.vendor) as proxy:
        client = connect(proxy.port)
        cursor = client.cursor()
        cursor.execute("INSERT INTO fault_probe VALUES (1)")
        proxy.cut_after_reply(b"COMMIT\x00" if connection.vendor == "postgresql" else b"\x03COMMIT")
        with pytest.raises(Exception, match=r"closed|Lost connection|gone away") as lost:
            client.commit()
        assert proxy.cuts == 1, lost.value
    assert rows() == [1]


def test_the_proxy_blackhole_drops_silently_until_healed(table):
    """blackhole: no error at once (no reset), the client's own timeout ends the wait;
    heal: new connections go through again (F2)."""
    with FaultProxy(connection.vendor) as proxy:
        client = connect(proxy.port)
        client.cursor().execute("SELECT 1")
        proxy.blackhole()
        began = time.monotonic()
        with pytest.raises(Exception, match=r"timed out|Lost connection"):
            client.cursor().execute("INSERT INTO fault_probe VALUES (2)")
        waited = time.monotonic() - began
        with pytest.raises(Exception, match=r"timeout expired|timed out|Can't connect|110"):
            connect(proxy.port)
        proxy.heal()
        again = connect(proxy.port)
        cursor = again.cursor()
        cursor.execute("SELECT 3")
        assert list(cursor.fetchall()) == [(3,)]
        again.close()
    assert waited >= 1  # the client waited for its timeout: nothing reset the connection


def test_the_proxy_delays_each_round_trip(table):
    """delay: a round trip takes at least the delay both ways (F5); heal: no delay again."""
    with FaultProxy(connection.vendor) as proxy:
        client = connect(proxy.port)
        cursor = client.cursor()
        cursor.execute("SELECT 1")
        cursor.fetchall()
        proxy.delay(0.2)
        began = time.monotonic()
        cursor.execute("SELECT 2")
        cursor.fetchall()
        assert time.monotonic() - began >= 0.4
        proxy.heal()
        client.close()


def test_the_proxy_resets_every_connection(table):
    with FaultProxy(connection.vendor) as proxy:
        client = connect(proxy.port)
        client.cursor().execute("SELECT 1")
        proxy.reset()
        cursor = client.cursor()
        with pytest.raises(Exception, match=r"closed|gone away|Lost connection"):
            cursor.execute("SELECT 2")
        assert proxy.open_connections == 0
