"""W2 and §13: at most one notifying commit in flight per process, and no run unannounced.

PostgreSQL serialises the commits of transactions that sent a ``NOTIFY``.
``store/announce.py`` lets one autocommit ``start()`` of a process carry the
notification at a time; one that finds another in flight writes without it
and leaves one owed, sent after its commit by whoever ends with it owed.
These tests hold a start "in flight" by the announcer's own state, so what
happens in which order is the test's, never the machine's.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from django_leasejobs import start
from django_leasejobs.listener import Listener
from django_leasejobs.models import Run
from django_leasejobs.store.announce import Notice, announcer
from tests.utils import statements

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.elsewhere(
        connection.vendor != "postgresql", reason="NOTIFY is PostgreSQL's; elsewhere W2 polls"
    ),
]

#: Long enough for a notification committed just before to be read; none is waited out.
HEAR = 5.0


@pytest.fixture(autouse=True)
def _announcer():
    announcer.forget()
    yield
    announcer.forget()


@pytest.fixture
def listener():
    opened = Listener.open()
    assert opened is not None
    opened.drain()  # its own self-test's notification
    yield opened
    opened.close()


def heard(listener, timeout: float = HEAR) -> int:
    """How many notifications arrive within *timeout* of the first (0: none within it)."""
    if not listener.wait(timeout, lambda: False):
        return 0
    return 1 + listener.drain()


def _notifying(captured) -> list[str]:
    return [sql for sql in statements(captured) if "pg_notify" in sql]


def test_w2_a_lone_start_carries_its_notification_in_its_insert(listener):
    with CaptureQueriesContext(connection) as captured:
        start("tests.noop", instance="lone")
    (insert,) = _notifying(captured)
    assert insert.startswith("INSERT")
    assert heard(listener) == 1
    assert announcer.notice("default").carries  # nothing left in flight


def test_w2_s13_a_start_beside_one_in_flight_writes_without_and_is_announced_after_it(listener):
    in_flight = announcer.notice("default")  # another thread's start, its INSERT on the way
    assert in_flight == Notice(carries=True, counted=True)
    with CaptureQueriesContext(connection) as captured:
        run = start("tests.noop", instance="beside").run
    assert _notifying(captured) == []  # no second notifying commit queued behind the first
    assert heard(listener, 0.2) == 0  # owed, not sent: the one in flight has not committed
    announcer.done("default", in_flight, wrote=True)  # the first start's commit returns
    assert heard(listener) == 1  # sent after both commits: a woken drive reads both runs
    assert Run.objects.filter(pk=run.pk).exists()


def test_w2_a_start_that_wrote_nothing_owes_nothing(listener):
    start("tests.noop", instance="joined")
    heard(listener)
    in_flight = announcer.notice("default")
    start("tests.noop", instance="joined")  # joins the live run (R1): no row went in
    announcer.done("default", in_flight, wrote=False)
    assert heard(listener, 0.2) == 0


def test_w2_inside_the_callers_transaction_a_start_notifies_at_its_commit_and_never_on_rollback(
    listener,
):
    in_flight = announcer.notice("default")  # even beside one in flight: the caller decides
    with CaptureQueriesContext(connection) as captured, transaction.atomic():
        start("tests.noop", instance="in-atomic")
    assert len(_notifying(captured)) == 1
    assert heard(listener) == 1
    with pytest.raises(RuntimeError):
        _started_then_rolled_back()
    assert heard(listener, 0.2) == 0
    announcer.done("default", in_flight, wrote=True)  # the other start's own, owed nothing
    assert heard(listener, 0.2) == 0


def _started_then_rolled_back() -> None:
    with transaction.atomic():
        start("tests.noop", instance="rolled-back")
        raise RuntimeError


def test_w2_s13_threads_starting_at_once_leave_no_run_unannounced(listener):
    """Sixteen threads, ten starts each, at once: whatever the interleaving, a
    notification follows the last commit, and nothing is left in flight or owed."""
    barrier = threading.Barrier(16)
    errors: list[BaseException] = []

    def starts(n: int) -> None:
        try:
            barrier.wait(timeout=30)
            for k in range(10):
                start("tests.noop", instance=f"t{n}-{k}")
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=starts, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert Run.objects.filter(job="tests.noop").count() == 160
    assert heard(listener) >= 1
    assert announcer.notice("default") == Notice(carries=True, counted=True)  # none in flight
    assert not announcer._owed
