"""The recipes of "Coming from elsewhere" (``docs/howto/switching.md``) run as the page shows them.

Each recipe's code is a module of :mod:`tests.switching`, included by the
page with ``literalinclude``: what is tested here is what a reader copies.

Two tests need what issue 28's other branches add, and pass only once those
are merged (each says so where it is defined): scheduled tasks,
``@task(schedule=..., timezone=..., missed=...)`` (SPEC §9), and
``p.walk(queryset, fn, *, size=500, total=False)`` (SPEC §3).
"""

from __future__ import annotations

import ast
import importlib
import itertools
import re
import sys
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path

import pytest
from croniter import croniter
from django.test import override_settings

from django_leasejobs import RunStatus, registry, run_due_jobs, start
from django_leasejobs.models import Run, Schedule
from tests.models import Subscriber
from tests.switching import shop
from tests.task_helpers import Status, drive
from tests.utils import at

pytestmark = pytest.mark.django_db

PAGE = Path(__file__).parent.parent / "docs" / "howto" / "switching.md"
#: Monday 2 March 2026: London is on GMT (UTC+0) until 29 March.
MONDAY = 2


@pytest.fixture
def recipe():
    """Import a recipe module afresh for this test; its jobs are unregistered after it."""
    before = set(registry.names())
    imported: list[str] = []
    shop.calls.clear()

    def load(name: str):
        path = f"tests.switching.{name}"
        sys.modules.pop(path, None)
        imported.append(path)
        return importlib.import_module(path)

    yield load
    for name in set(registry.names()) - before:
        registry.unregister(name)
    for path in imported:
        sys.modules.pop(path, None)
    shop.calls.clear()


# -- (a) from django-tasks-db ---------------------------------------------------------------------


def test_switching_a_the_same_task_code_enqueues_and_runs_after_the_tasks_swap(recipe):
    tasks_db = recipe("tasks_db")
    settings = recipe("tasks_db_after").TASKS
    before, after = recipe("tasks_db_before").TASKS["default"], settings["default"]
    # Only the backend changes (and the options django-tasks-db did not have).
    assert {**before, "BACKEND": after["BACKEND"], "OPTIONS": after["OPTIONS"]} == after
    with override_settings(TASKS=settings):
        result_id = tasks_db.sign_up(7)
        assert shop.calls == []  # enqueued, not run: a worker runs it
        assert drive().completed == 1
        result = tasks_db.send_welcome_email.get_result(result_id)
        assert result.status == Status.SUCCESSFUL
        assert result.return_value == "welcome mail sent to user 7"
        assert result.task == tasks_db.send_welcome_email
        assert shop.calls == ["welcome:7"]
        run = Run.objects.get(pk=result_id)
        assert (run.queue, run.instance) == (
            "emails",
            "tests.switching.tasks_db.send_welcome_email",
        )
        backend = tasks_db.send_welcome_email.get_backend()
        assert backend.task_options.retry.max_attempts == 3  # what the swap adds


# -- (b) from django-q2 schedules ------------------------------------------------------------------


def test_switching_b_a_django_q2_cron_schedule_fires_as_a_job(recipe, frozen_clock):
    q2 = recipe("q2")
    frozen_clock.set(at(12, 0))  # Sunday
    run_due_jobs(jobs=[q2.daily_summary.name])
    row = Schedule.objects.get(job="shop.daily_summary")
    assert (row.expression, row.timezone, row.rule) == (
        "0 7 * * 1-5",
        "Europe/London",
        "catch_up_once",
    )
    assert row.next_due_at == at(7, 0, day=MONDAY)
    frozen_clock.set(at(7, 0, day=MONDAY))
    run_due_jobs(jobs=[q2.daily_summary.name], max_passes=2)
    assert shop.calls == ["daily_summary"]


# -- (c) from Celery beat --------------------------------------------------------------------------


def test_switching_c_celery_beat_entries_fire_as_scheduled_jobs(recipe, frozen_clock):
    beat = recipe("beat")
    names = [beat.digest.name, beat.rates.name, beat.sessions.name]
    frozen_clock.set(at(6, 59, day=MONDAY))
    run_due_jobs(jobs=names)
    due = dict(Schedule.objects.filter(job__in=names).values_list("job", "next_due_at"))
    assert due == {
        "shop.digest": at(7, 30, day=MONDAY),
        "shop.rates": at(7, 0, day=MONDAY),
        "shop.sessions": at(12, 0, day=MONDAY),
    }
    for minute in (0, 15, 30):  # a worker's drives at each due time
        frozen_clock.set(at(7, minute, day=MONDAY))
        run_due_jobs(jobs=names)
    assert shop.calls == ["rates", "rates", "digest", "rates"]


def _page_table() -> list[tuple[str, str]]:
    """The page's beat table: (``crontab(...)`` or ``timedelta(...)``, cron string) per row."""
    rows = re.findall(
        r"^\| `((?:crontab|timedelta)\(.*?\))` \| `([^`]+)` \|", PAGE.read_text(), re.M
    )
    assert len(rows) >= 10, rows
    return rows


def _arguments(call: str) -> dict[str, object]:
    (node,) = ast.parse(call).body
    assert isinstance(node, ast.Expr)
    assert isinstance(node.value, ast.Call)
    return {word.arg: ast.literal_eval(word.value) for word in node.value.keywords}


#: Celery's ``crontab`` arguments in the order of cron's fields.
CRON_FIELDS = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")


@pytest.mark.parametrize(("beat", "cron"), _page_table())
def test_switching_c_each_row_of_the_pages_beat_table_is_the_same_schedule(define, beat, cron):
    """A ``crontab`` row moves each argument (default ``*``) to its cron field; a
    ``timedelta`` row's cron string fires exactly that far apart all day; and
    ``@job(schedule=...)`` takes each string."""
    arguments = _arguments(beat)
    if beat.startswith("crontab"):
        assert set(arguments) <= set(CRON_FIELDS)
        assert " ".join(str(arguments.get(field, "*")) for field in CRON_FIELDS) == cron
    else:
        every = timedelta(**arguments)  # type: ignore[arg-type]
        fires = croniter(cron, datetime(2026, 3, 2, tzinfo=UTC))
        times = [fires.get_next(datetime) for _ in range(int(timedelta(days=2) / every) + 1)]
        assert {later - earlier for earlier, later in itertools.pairwise(times)} == {every}
    define("t.switching.beat_row", lambda p: p.done(), schedule=cron)


def test_switching_c_celery_beat_entries_fire_as_scheduled_tasks(recipe, frozen_clock):
    beat_tasks = recipe("beat_tasks")
    paths = {
        "tests.switching.beat_tasks.send_digest": ("30 7 * * mon-fri", "Europe/London"),
        "tests.switching.beat_tasks.refresh_rates": ("*/15 * * * *", "UTC"),
    }
    frozen_clock.set(at(6, 59, day=MONDAY))
    run_due_jobs()
    rows = Schedule.objects.filter(job__in=paths)
    assert {row.job: (row.expression, row.timezone) for row in rows} == paths
    frozen_clock.set(at(7, 30, day=MONDAY))
    run_due_jobs(max_passes=2)  # fires the due times, then runs the tasks they enqueued
    run_due_jobs(max_passes=2)
    assert "digest" in shop.calls
    digest = Run.objects.get(job="tests.switching.beat_tasks.send_digest")  # the task's own job
    assert digest.status == RunStatus.DONE
    assert beat_tasks.send_digest.get_result(digest.pk).status == Status.SUCCESSFUL


# -- (d) from a hand-written management-command backfill -------------------------------------------


@pytest.fixture
def subscribers():
    Subscriber.objects.bulk_create(Subscriber(email=f"User{n}@Example.COM") for n in range(1234))
    return 1234


def test_switching_d_the_hand_written_backfill_lowercases_every_row(recipe, subscribers):
    backfill = recipe("backfill")
    out = StringIO()
    backfill.Command(stdout=out).handle()
    assert not Subscriber.objects.exclude(email__regex=r"^user[0-9]+@example\.com$").exists()
    assert len(out.getvalue().splitlines()) == 3  # 500, 500, 234


def test_switching_d_the_walk_does_the_same_backfill_one_batch_a_pass(recipe, subscribers):
    backfill = recipe("backfill")
    run = start(backfill.lowercase_emails).run
    report = run_due_jobs(jobs=[backfill.lowercase_emails.name], max_passes=10)
    assert (report.advanced, report.completed) == (2, 1)  # 500, 500, then 234 and done
    run.refresh_from_db()
    assert run.status == RunStatus.DONE
    assert run.decoded_counters().value["walked"] == subscribers
    assert not Subscriber.objects.exclude(email__regex=r"^user[0-9]+@example\.com$").exists()


def test_switching_the_page_includes_each_recipe_module():
    """The page shows the modules tested here, not a copy that could drift."""
    text = PAGE.read_text()
    names = (
        "tasks_db_before",
        "tasks_db_after",
        "tasks_db",
        "q2",
        "beat",
        "beat_tasks",
        "backfill",
    )
    for name in names:
        assert f"```{{literalinclude}} ../../tests/switching/{name}.py" in text, name
