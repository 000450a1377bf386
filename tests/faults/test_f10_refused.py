"""F10: connections refused never wedge a worker (SPEC §17, W5's N + 2, §13).

Real ``rundueJobs --loop --concurrency 4`` workers connect as a role of their own
whose connections are capped -- PostgreSQL's ``CONNECTION LIMIT``, MariaDB's
``MAX_USER_CONNECTIONS`` -- well below what three workers may hold (3 x (N + 2)
= 18 against 4): the same refusals as a server at ``max_connections``, without
touching the shared server's setting. Before revision 4, with Django's default
``CONN_MAX_AGE = 0``, idle pass threads kept their connections while the drive,
which reconnects every drive, could not get one: the workers stopped with runs
left. Now idle threads give theirs back, a refused drive backs off and drives
again, every run is driven, and once the workers are idle another client of
that role connects.
"""

from __future__ import annotations

import os

import pytest
from django.db import connection

from django_leasejobs import RunStatus, start
from django_leasejobs.models import Run
from tests.faults.stall_jobs import BRIEF
from tests.processes import django_command
from tests.test_concurrency import stop_all
from tests.utils import on_a_server_only, wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.concurrency,
    pytest.mark.faults,
    on_a_server_only,
]

WAIT = 300  # seconds: capped at 4 connections, 60 runs take about a minute on an idle machine
LIMIT = 4  # connections the workers' role may hold at once
PASSWORD = "f10-not-secret"


@pytest.fixture
def capped_role():
    """A role (user) of the test database's server whose connections are capped at LIMIT,
    allowed the test database's tables; dropped, with its sessions, afterwards.
    Returns ``DATABASE_URL`` for it."""
    suffix = os.environ.get("TOX_ENV_NAME", "local").replace("-", "_").replace(".", "_")
    name = f"leasejobs_f10_{suffix}"[:32]
    database = connection.settings_dict["NAME"]
    host = connection.settings_dict["HOST"] or "127.0.0.1"
    port = connection.settings_dict["PORT"]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f'DROP ROLE IF EXISTS "{name}"')
            cursor.execute(
                f"CREATE ROLE \"{name}\" LOGIN PASSWORD '{PASSWORD}' CONNECTION LIMIT {LIMIT}"
            )
            cursor.execute(f'GRANT USAGE ON SCHEMA public TO "{name}"')
            cursor.execute(f'GRANT ALL ON ALL TABLES IN SCHEMA public TO "{name}"')
            cursor.execute(f'GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO "{name}"')
            url = f"postgres://{name}:{PASSWORD}@{host}:{port or 5432}/{database}"
        else:
            cursor.execute(f"DROP USER IF EXISTS '{name}'@'%'")
            cursor.execute(
                f"CREATE USER '{name}'@'%' IDENTIFIED BY '{PASSWORD}' "
                f"WITH MAX_USER_CONNECTIONS {LIMIT}"
            )
            cursor.execute(f"GRANT ALL ON `{database}`.* TO '{name}'@'%'")
            url = f"mysql://{name}:{PASSWORD}@{host}:{port or 3306}/{database}"
    try:
        yield url, name
    finally:
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                    [name],
                )
                cursor.execute(f'DROP OWNED BY "{name}"')
                cursor.execute(f'DROP ROLE IF EXISTS "{name}"')
            else:
                cursor.execute(
                    "SELECT id FROM information_schema.processlist WHERE user = %s", [name]
                )
                for (session,) in cursor.fetchall():
                    cursor.execute(f"KILL {int(session)}")
                cursor.execute(f"DROP USER IF EXISTS '{name}'@'%'")


def _connects(url: str) -> bool:
    """Whether a new client of the capped role gets a connection now."""
    from urllib.parse import urlparse

    parts = urlparse(url)
    try:
        if connection.vendor == "postgresql":
            import psycopg

            with psycopg.connect(
                host=parts.hostname,
                port=parts.port,
                user=parts.username,
                password=PASSWORD,
                dbname=parts.path.lstrip("/"),
                connect_timeout=5,
            ):
                return True
        import MySQLdb

        client = MySQLdb.connect(
            host=parts.hostname,
            port=parts.port,
            user=parts.username,
            password=PASSWORD,
            database=parts.path.lstrip("/"),
            connect_timeout=5,
        )
        client.close()
        return True
    except Exception:
        return False


def test_f10_workers_beyond_the_connection_limit_drive_every_run_and_give_connections_back(
    capped_role,
):
    """Three workers of N = 4 (N + 2 = 6 each) on a role capped at 4 connections:
    all 60 runs (passes of 0.2 s, so every thread is wanted) are driven, none lost
    or failed, and once they are done the idle workers -- still running -- leave
    room for another client of the role."""
    url, _name = capped_role
    runs = [start(BRIEF, {"sleep": 0.2}, instance=f"r{n}").run.pk for n in range(60)]
    base = ["rundueJobs", "--loop", "--interval", "0.2", "--concurrency", "4", "--json"]
    fleet = [django_command(*base, "--job", BRIEF, env={"DATABASE_URL": url}) for _ in range(3)]
    try:
        done = Run.objects.filter(pk__in=runs, status=RunStatus.DONE)

        def all_done() -> bool:
            for worker in fleet:
                assert worker.poll() is None, worker.communicate()
            return done.count() == len(runs)

        wait_for(all_done, "every run driven by workers beyond the connection limit", WAIT)
        wait_for(lambda: _connects(url), "a connection for another client of the role", WAIT)
    finally:
        reaped = stop_all(fleet)
    assert [code for code, _out, _err in reaped] == [0, 0, 0], reaped
    assert Run.objects.filter(pk__in=runs).exclude(status=RunStatus.DONE).count() == 0
