"""The metrics view (SPEC §16 O2, §11 revision 3): who is admitted, and what it answers."""

from __future__ import annotations

import base64
import importlib
import sys
from collections import Counter
from datetime import timedelta

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import OperationalError, connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from prometheus_client.parser import text_string_to_metric_families

import django_leasejobs
from django_leasejobs import RunStatus, pause_queue, start
from django_leasejobs.models import PassStat, Run
from django_leasejobs.models.observability import BUCKETS
from django_leasejobs.stats import aggregate
from tests.factories import RunFactory
from tests.utils import due_in_queue, on_sqlite_only, stat_columns, store_text

pytestmark = pytest.mark.django_db

URL = "/metrics/leasejobs"
TOKEN = "scrape-token-0123456789abcdef"
#: Every label name the view may use: none can hold a run's own values.
LABEL_NAMES = {"queue", "status", "job_name", "outcome", "le"}


@pytest.fixture
def token():
    """LEASEJOBS["METRICS_TOKEN"] set, in the settings in force (PREPARE runs keep theirs)."""
    with override_settings(
        LEASEJOBS={**getattr(settings, "LEASEJOBS", {}), "METRICS_TOKEN": TOKEN}
    ):
        yield TOKEN


def scrape(header: str | None = None, client: Client | None = None, method: str = "get"):
    headers = {} if header is None else {"Authorization": header}
    return getattr(client or Client(), method)(URL, headers=headers)


def samples(response):
    """Every sample of a 200 answer, parsed as Prometheus parses it."""
    assert response.status_code == 200, response.content
    text = response.content.decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def values(found, name):
    """``{frozenset(labels.items()): value}`` of the samples called *name*."""
    return {frozenset(s.labels.items()): s.value for s in found if s.name == name}


def user(*, staff: bool = False, permission: str | None = None):
    person = get_user_model().objects.create_user("ops", "ops@example.invalid", "pw")
    person.is_staff = staff
    person.save()
    if permission:
        app_label, codename = permission.split(".")
        person.user_permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    client = Client()
    client.force_login(person)
    return client


def refused(response):
    """403, and nothing of the figures in it."""
    assert response.status_code == 403
    assert b"leasejobs_" not in response.content
    return True


# -- access ----------------------------------------------------------------------------


def test_o2_anonymous_is_refused_403_with_no_data(token):
    start("tests.noop", instance="visible")
    assert refused(scrape())


def test_o2_staff_without_view_run_is_refused_403(token):
    assert refused(scrape(client=user(staff=True)))


def test_o2_a_user_with_view_run_is_served():
    found = samples(scrape(client=user(permission="leasejobs.view_run")))
    assert values(found, "leasejobs_held_runs") == {frozenset(): 0}


def test_o2_the_right_bearer_token_is_served(token):
    response = scrape(f"Bearer {token}")
    assert response["Content-Type"].startswith("text/plain; version=")
    assert "no-cache" in response["Cache-Control"] or "no-store" in response["Cache-Control"]
    assert values(samples(response), "leasejobs_held_runs") == {frozenset(): 0}
    assert scrape(f"bearer {token}").status_code == 200  # the scheme is case-insensitive
    assert scrape(f"Bearer  {token}").status_code == 200  # RFC 6750: 1*SP


@pytest.mark.parametrize(
    "header",
    [
        f"Bearer {TOKEN}x",
        f"Bearer {TOKEN[:-1]}",
        "Bearer wrong-token-0123456789abcd",
        "Bearer ",
        "Bearer",
        "",
        f"Basic {base64.b64encode(f'ops:{TOKEN}'.encode()).decode()}",
        f"Basic {TOKEN}",
        f"Token {TOKEN}",
        TOKEN,
        "Bearer tök-0123456789abcdefghij",
    ],
    ids=[
        "longer",
        "shorter",
        "wrong",
        "empty",
        "no credentials",
        "blank header",
        "basic",
        "basic raw",
        "other scheme",
        "no scheme",
        "non-ascii",
    ],
)
def test_o2_s11_a_wrong_empty_or_basic_token_is_refused_403(token, header):
    start("tests.noop", instance="visible")
    assert refused(scrape(header))


def test_o2_s11_no_token_admits_anyone_while_metrics_token_is_none():
    assert getattr(settings, "LEASEJOBS", {}).get("METRICS_TOKEN") is None
    for header in (f"Bearer {TOKEN}", "Bearer None", "Bearer ", "Bearer null"):
        assert refused(scrape(header))


def test_o2_a_token_setting_too_short_admits_nobody():
    """A malformed METRICS_TOKEN (manage.py check reports it) is not a password that works."""
    with override_settings(LEASEJOBS={"METRICS_TOKEN": "short"}):
        assert refused(scrape("Bearer short"))


def test_o2_only_get_and_no_csrf_token_needed(token):
    client = Client(enforce_csrf_checks=True)
    for method in ("post", "put", "delete"):
        response = scrape(f"Bearer {token}", client=client, method=method)
        assert response.status_code == 405
        assert b"leasejobs_" not in response.content
    assert scrape(f"Bearer {token}", client=client).status_code == 200


# -- what it answers -------------------------------------------------------------------------


def test_o2_due_runs_per_queue_equal_the_real_count(frozen_clock, token):
    now = frozen_clock.now()
    due_in_queue("mail", now, 0, 10, 20)
    due_in_queue("mail", now, -3600, prefix="later")
    for n in range(2):
        start("tests.noop", instance=f"r{n}", queue="reports")
    pause_queue("reports", by="ops")
    pause_queue("idle", by="ops")
    RunFactory(status=RunStatus.DONE, queue="bulk", started_at=now - timedelta(days=1))
    RunFactory(status=RunStatus.FAILED, queue="mail", started_at=now - timedelta(days=1))
    RunFactory(status=RunStatus.HELD, queue="mail", started_at=now - timedelta(minutes=1))
    found = samples(scrape(f"Bearer {token}"))

    real = Counter(
        Run.objects.filter(status=RunStatus.RUNNING, next_attempt_at__lte=now).values_list(
            "queue", flat=True
        )
    )
    assert real == {"mail": 3, "reports": 2}
    due = {
        dict(labels)["queue"]: value
        for labels, value in values(found, "leasejobs_due_runs").items()
    }
    assert due == {"mail": 3, "reports": 2, "idle": 0}
    assert all(due[queue] == real.get(queue, 0) for queue in due)
    oldest = values(found, "leasejobs_oldest_due_seconds")
    assert oldest[frozenset({("queue", "mail")})] == 20
    assert oldest[frozenset({("queue", "idle")})] == 0
    paused = values(found, "leasejobs_queue_paused")
    assert paused == {
        frozenset({("queue", "mail")}): 0,
        frozenset({("queue", "reports")}): 1,
        frozenset({("queue", "idle")}): 1,
    }
    live = values(found, "leasejobs_live_runs")
    assert live == {frozenset({("status", "running")}): 6, frozenset({("status", "held")}): 1}
    assert values(found, "leasejobs_held_runs") == {frozenset(): 1}


def test_o2_held_stalled_throttled_and_overdue_are_gauges(frozen_clock, token):
    now = frozen_clock.now()
    RunFactory(status=RunStatus.HELD)
    RunFactory(job="tests.noop", started_at=now - timedelta(hours=1))  # past STALL_AFTER
    RunFactory(throttled_by="rate", lease_owner=None)
    found = samples(scrape(f"Bearer {token}"))
    for name, expected in [
        ("leasejobs_held_runs", 1),
        ("leasejobs_stalled_runs", 1),
        ("leasejobs_throttled_runs", 1),
        ("leasejobs_overdue_schedules", 0),
    ]:
        assert values(found, name) == {frozenset(): expected}, name


def test_o2_no_run_id_instance_payload_or_limit_key_in_any_label(token, drive):
    secrets_of_runs = set()
    for n in range(4):
        run = start(
            "tests.noop", {"customer": f"payload-secret-{n}"}, instance=f"inst-secret-{n}"
        ).run
        Run.objects.filter(pk=run.pk).update(limit_key=f"limit-key-secret-{n}")
        secrets_of_runs |= {run.pk, run.instance, f"payload-secret-{n}", f"limit-key-secret-{n}"}
    held = RunFactory(status=RunStatus.HELD, instance="held-secret", limit_key="held-key-secret")
    secrets_of_runs |= {held.pk, held.instance, held.limit_key}
    drive("tests.noop")  # passes, so that the job's figures are there too
    aggregate.flush(force=True)
    start("tests.noop", {"customer": "payload-secret-due"}, instance="inst-secret-due")
    secrets_of_runs |= {"payload-secret-due", "inst-secret-due"}
    response = scrape(f"Bearer {token}")
    found = samples(response)
    assert values(found, "leasejobs_passes_15m")  # the per-job families are not empty
    for sample in found:
        assert set(sample.labels) <= LABEL_NAMES, sample
        for value in sample.labels.values():
            assert not any(secret in value for secret in secrets_of_runs), sample
    body = response.content.decode()
    assert not [secret for secret in secrets_of_runs if secret in body]


def test_o2_o1_passes_of_the_last_15_minutes_per_job_queue_and_outcome(token, drive):
    """Real passes, flushed as a worker flushes them (O1), read back by the view."""
    for n in range(3):
        start("tests.noop", instance=f"p{n}")
    start("tests.noop", instance="mailed", queue="mail")
    assert drive("tests.noop").completed == 4
    aggregate.flush(force=True)
    found = samples(scrape(f"Bearer {token}"))
    passes = values(found, "leasejobs_passes_15m")
    key = {("job_name", "tests.noop"), ("outcome", "completed")}
    assert passes == {
        frozenset(key | {("queue", "default")}): 3,
        frozenset(key | {("queue", "mail")}): 1,
    }
    count = values(found, "leasejobs_pass_seconds_15m_count")
    assert count[frozenset({("job_name", "tests.noop"), ("queue", "default")})] == 3
    assert values(found, "leasejobs_unreadable_stat_rows_15m") == {frozenset(): 0}


def test_o2_the_duration_histogram_is_cumulative_from_the_stored_buckets(frozen_clock, token):
    minute = frozen_clock.now().replace(second=0, microsecond=0)
    row = {"minute": minute - timedelta(minutes=2), "job": "t.h", "queue": "q"}
    PassStat.objects.create(
        **row, outcome="completed", count=6, le_00=2, le_07=3, total_seconds=2.5, max_seconds=400
    )  # 2 within 5 ms, 3 within 1 s, 1 past the last bound
    PassStat.objects.create(**row, outcome="failed", count=1, le_02=1, total_seconds=0.02)
    old = {**row, "minute": minute - timedelta(minutes=20)}  # outside the window
    PassStat.objects.create(**old, outcome="completed", count=50, le_00=50)
    found = samples(scrape(f"Bearer {token}"))
    labels = {("job_name", "t.h"), ("queue", "q")}
    buckets = {
        dict(k)["le"]: v
        for k, v in values(found, "leasejobs_pass_seconds_15m_bucket").items()
        if labels <= k
    }
    assert list(buckets) == [*(str(bound) for bound in BUCKETS), "+Inf"]
    assert buckets["0.005"] == 2
    assert buckets["0.01"] == 2
    assert buckets["0.025"] == 3  # the failed pass
    assert buckets["0.5"] == 3
    assert buckets["1.0"] == 6
    assert buckets["300.0"] == 6
    assert buckets["+Inf"] == 7
    assert values(found, "leasejobs_pass_seconds_15m_count") == {frozenset(labels): 7}
    assert values(found, "leasejobs_pass_seconds_15m_sum") == {frozenset(labels): 2.52}
    passes = values(found, "leasejobs_passes_15m")
    assert passes == {
        frozenset(labels | {("outcome", "completed")}): 6,
        frozenset(labels | {("outcome", "failed")}): 1,
    }


def test_o2_s11_malformed_statistics_rows_are_skipped_and_counted(frozen_clock, token):
    minute = frozen_clock.now().replace(second=0, microsecond=0)
    row = {"job": "t.m", "queue": "q"}
    PassStat.objects.create(**row, minute=minute, outcome="exploded", count=3)
    PassStat.objects.create(**row, minute=minute - timedelta(minutes=1), outcome="done", count=-2)
    PassStat.objects.create(
        **row, minute=minute - timedelta(minutes=2), outcome="completed", count=1, le_00=5
    )
    PassStat.objects.create(
        **row, minute=minute - timedelta(minutes=3), outcome="completed", count=1, total_seconds=-1
    )
    PassStat.objects.create(
        **row, minute=minute - timedelta(minutes=4), outcome="completed", count=2
    )
    found = samples(scrape(f"Bearer {token}"))
    assert values(found, "leasejobs_unreadable_stat_rows_15m") == {frozenset(): 4}
    passes = values(found, "leasejobs_passes_15m")
    assert passes == {frozenset({("job_name", "t.m"), ("queue", "q"), ("outcome", "completed")}): 2}


@on_sqlite_only
@pytest.mark.parametrize("column", stat_columns())
def test_o2_s11_text_in_a_number_column_is_counted_unreadable_never_a_500(
    frozen_clock, token, column
):
    """SQLite keeps text in a number's column: never a 500, never summed as 0 passes."""
    minute = frozen_clock.now().replace(second=0, microsecond=0)
    row = {"job": "t.m", "queue": "q", "outcome": "completed"}
    PassStat.objects.create(**row, minute=minute, count=2, le_00=2, total_seconds=0.004)
    bad = PassStat.objects.create(
        **row, minute=minute - timedelta(minutes=1), count=3, total_seconds=900, max_seconds=400
    )
    store_text(bad, column)
    found = samples(scrape(f"Bearer {token}"))  # 200
    assert values(found, "leasejobs_unreadable_stat_rows_15m") == {frozenset(): 1}
    assert list(values(found, "leasejobs_passes_15m").values()) == [2]
    assert list(values(found, "leasejobs_pass_seconds_15m_count").values()) == [2]
    assert list(values(found, "leasejobs_pass_seconds_15m_sum").values()) == [0.004]


@pytest.mark.parametrize("untimed", ["held", "throttled"])
def test_o2_o1_untimed_passes_are_counted_but_never_in_the_duration_histogram(
    frozen_clock, token, untimed
):
    """A held takeover or a throttled pass ran no handler: a pass, never a 2.5 ms duration."""
    minute = frozen_clock.now().replace(second=0, microsecond=0)
    row = {"minute": minute, "job": "t.u", "queue": "q"}
    PassStat.objects.create(**row, outcome="completed", count=2, le_07=2, total_seconds=1.5)
    PassStat.objects.create(**row, outcome=untimed, count=4, le_00=4, total_seconds=0.01)
    found = samples(scrape(f"Bearer {token}"))
    passes = values(found, "leasejobs_passes_15m")
    assert sorted(passes.values()) == [2, 4]
    assert list(values(found, "leasejobs_pass_seconds_15m_count").values()) == [2]
    assert list(values(found, "leasejobs_pass_seconds_15m_sum").values()) == [1.5]
    buckets = values(found, "leasejobs_pass_seconds_15m_bucket")
    le = {dict(labels)["le"]: value for labels, value in buckets.items()}
    assert (le["0.005"], le["0.5"], le["1.0"], le["+Inf"]) == (0, 0, 2, 2)


def test_o2_s11_a_database_error_answers_503_never_500(token, monkeypatch, caplog):
    def refuse(*args, **kwargs):
        raise OperationalError("could not connect to postgres://app:hunter2@db.internal/app")

    monkeypatch.setattr("django_leasejobs.figures.queues", refuse)
    response = scrape(f"Bearer {token}")
    assert response.status_code == 503
    body = response.content.decode()
    assert body.count("\n") == 1
    assert "hunter2" not in body
    assert "postgres://" not in body
    assert "leasejobs_" not in body
    assert not any("hunter2" in record.getMessage() for record in caplog.records)
    monkeypatch.undo()
    assert scrape(f"Bearer {token}").status_code == 200


@pytest.mark.parametrize("failing", ["attention", "window"])
def test_o2_s11_a_database_error_in_any_read_answers_503(token, monkeypatch, failing):
    def refuse(*args, **kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(f"django_leasejobs.figures.{failing}", refuse)
    assert scrape(f"Bearer {token}").status_code == 503


def test_o2_without_prometheus_client_the_view_imports_and_answers_501(token, monkeypatch):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import fails: "not installed"
    monkeypatch.delitem(sys.modules, "django_leasejobs.views", raising=False)
    monkeypatch.delattr(django_leasejobs, "views", raising=False)
    views = importlib.import_module("django_leasejobs.views")  # imports without it
    assert sys.modules["prometheus_client"] is None
    from django.test import RequestFactory

    request = RequestFactory().get(URL, headers={"Authorization": f"Bearer {token}"})
    response = views.metrics(request)
    assert response.status_code == 501
    text = response.content.decode()
    assert text.count("\n") == 1
    assert "django-leasejobs[prometheus]" in text
    anonymous = RequestFactory().get(URL)
    assert views.metrics(anonymous).status_code == 403  # no hint to whom is not admitted


def test_o2_a_scrape_costs_the_same_few_statements_whatever_the_history(token, frozen_clock):
    """O2: gauges read by a fixed set of bounded reads: the history adds no statement."""

    def statements_of_a_scrape():
        with CaptureQueriesContext(connection) as captured:
            samples(scrape(f"Bearer {token}"))
        return len(captured)

    empty = statements_of_a_scrape()
    now = frozen_clock.now()
    for n in range(20):
        start("tests.noop", instance=f"b{n}", queue=f"q{n % 4}")
    RunFactory.create_batch(30, status=RunStatus.DONE, started_at=now - timedelta(days=2))
    minute = now.replace(second=0, microsecond=0)
    for n in range(10):
        PassStat.objects.create(
            minute=minute - timedelta(minutes=n), job=f"j{n % 3}", queue="q", outcome="completed"
        )
    assert statements_of_a_scrape() == empty <= 9
