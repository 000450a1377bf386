"""SPEC §13: a compiled statement sends exactly what ``QuerySet.update()`` would send.

Each hot statement of the store is compiled once and bound per call
(``store/sql/``). These tests run every shape both ways on the
database under test -- once as the compiled statement, once as the
``QuerySet.update()`` (or ``bulk_create()``) it stands for, with the same
values -- and compare the SQL each sent, parameters interpolated, as the
backend logged it. Under the database clock and under a test clock, since the
two compile ``now`` differently.
"""

from __future__ import annotations

import itertools
import re
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_leasejobs import start, start_many
from django_leasejobs.models import Run, Step
from django_leasejobs.states import RunOrigin, RunStatus
from django_leasejobs.store import ahead, claims, commits, next_begin, next_pass, renewals, setbacks
from django_leasejobs.store.sql import Slots, Statement, Unnest, returns_rows
from django_leasejobs.store.starts import _INSERT, Route, Row, insert
from tests.utils import fresh

pytestmark = pytest.mark.django_db

LEASE = timedelta(seconds=30)
FIELDS = [field.attname for field in Run._meta.concrete_fields]
STEP = ["run_id", "name", "result", "attempts", "last_error", "recorded_at", "began_at"]

HELD = {"run_id": "01HZZZZZZZZZZZZZZZZZZZZZZZ", "owner": "owner-token-1"}
CLAIM = {**HELD, "lease": LEASE, "holder": "host:1:2:abc"}

#: Every statement shape the store compiles, with values a pass could bind.
SHAPES: list[tuple[str, Statement, dict[str, object]]] = [
    ("claim", claims.CLAIM[False], CLAIM),
    ("takeover", claims.CLAIM[True], CLAIM),
    ("begin", claims.BEGIN, {**HELD, "margin": LEASE / 4}),
    ("begin, limited", claims.BEGIN_LIMITED, {**HELD, "margin": LEASE / 4}),
    (
        "claim ahead",
        ahead._claim_ahead(3),
        {"run_0": "01J0", "run_1": "01J1", "run_2": "01J2", "prefix": "PREFIX0001"}
        | {"lease": LEASE, "holder": "host:1:2:abc"},
    ),
    ("renew", renewals._renewal(with_step=False), {**HELD, "lease": LEASE}),
    ("renew+step", renewals._renewal(with_step=True), {**HELD, "lease": LEASE}),
    (
        "renew, holding a slot",
        renewals._renewal(with_step=False, strict=True),
        {**HELD, "lease": LEASE},
    ),
    ("defer", setbacks._DEFER, {**HELD, "delay": timedelta(minutes=5)}),
    *(
        (
            f"settle retrying={retrying}",
            setbacks._settle(retrying=retrying),
            {
                **HELD,
                "attempts": 2,
                "failure_code": "exception",
                "error": "ValueError: 'quoted' \\ and %s",
                "retry_in": timedelta(seconds=7) if retrying else None,
            },
        )
        for retrying in (False, True)
    ),
    *(
        (
            f"commit {flags}",
            commits.commit_statement(**dict(zip(_names, flags, strict=True))),
            {**HELD, "cursor": '{"page":3}', "counters": '{"seen":9}', "total": 120}
            | {"result": '{"rows":3}'},
        )
        for _names in [("done", "quiet", "total", "drop_steps", "no_cursor", "result")]
        for flags in itertools.product((False, True), repeat=6)
    ),
    *(
        (
            f"advance going on {flags}",
            next_pass._gone_on(**dict(zip(_names, flags, strict=True))),
            {**CLAIM, "cursor": '{"page":3}', "counters": '{"seen":9}', "total": 120}
            | {"idle_passes": 2, "next_owner": "owner-token-2"},
        )
        for _names in [("total", "drop_steps", "no_cursor", "idle")]
        for flags in itertools.product((False, True), repeat=4)
    ),
]


def _sent(action) -> str:
    """The one data statement *action* sent, as the backend logged it."""
    with CaptureQueriesContext(connection) as captured:
        action()
    (query,) = [q["sql"] for q in captured.captured_queries if q["sql"] is not None]
    return query


def _update_sent(statement: Statement, values: dict[str, object]) -> str:
    queryset, update = statement.queryset("default", **values)
    return _sent(lambda: queryset.update(**update))


@pytest.fixture(params=["database clock", "test clock"])
def clock(request):
    if request.param == "test clock":
        request.getfixturevalue("frozen_clock")


@pytest.mark.usefixtures("clock")
@pytest.mark.parametrize(("name", "statement", "values"), SHAPES, ids=[s[0] for s in SHAPES])
def test_s13_a_compiled_update_sends_what_queryset_update_sends(name, statement, values):
    compiled = _sent(lambda: statement.run("default", **values))
    assert compiled == _update_sent(statement, values)


@pytest.mark.usefixtures("clock")
@pytest.mark.parametrize("takeover", [False, True])
def test_s13_a_claim_that_returns_its_row_is_the_update_plus_returning(takeover):
    statement = claims.CLAIM[takeover]
    if not returns_rows("default"):
        # MariaDB cannot return updated rows: its claim is the UPDATE, then a read.
        with CaptureQueriesContext(connection) as captured:
            claims.claim_and_read(
                CLAIM["run_id"], CLAIM["owner"], LEASE, CLAIM["holder"], takeover=takeover
            )
        sent = [q["sql"] for q in captured.captured_queries]
        assert sent == [_update_sent(statement, CLAIM)]  # lost: nothing to read back
        return
    fetched = _sent(lambda: statement.fetch("default", **CLAIM))
    update, returning = fetched.split(" RETURNING ")
    assert update == _update_sent(statement, CLAIM)
    # RETURNING lists the run's columns as Django's own SELECT of a run does.
    select = str(Run.objects.all().query).split(" FROM ")[0].removeprefix("SELECT ")
    assert returning == select


def test_s13_a_claim_returns_the_run_as_a_queryset_reads_it(frozen_clock):
    run = start("tests.walk", {"n": 1}).run
    values = {**CLAIM, "run_id": run.pk}
    if returns_rows("default"):
        claimed = claims.CLAIM[False].fetch("default", **values)
    else:
        assert claims.CLAIM[False].run("default", **values)
        claimed = Run.objects.get(pk=run.pk)
    stored = Run.objects.get(pk=run.pk)
    assert [getattr(claimed, f) for f in FIELDS] == [getattr(stored, f) for f in FIELDS]
    assert claimed.lease_owner == CLAIM["owner"]
    assert claimed._state.adding is False


def _rows(prefix: str, count: int) -> list[Row]:
    return [
        Row(f"01J{prefix}{n:020d}", f"{prefix}{n}", f'{{"n":{n}}}', f"tests.walk|{prefix}{n}")
        for n in range(count)
    ]


@pytest.mark.usefixtures("clock")
@pytest.mark.parametrize("deferred", [False, True], ids=["due now", "run_after"])
def test_s13_a_compiled_insert_sends_what_bulk_create_sends(deferred, frozen_clock):
    rows = _rows("i", 3)
    run_after = frozen_clock.now() + timedelta(hours=1) if deferred else None
    values: dict[str, object] = {"job": "tests.walk", "origin": "api", "run_after": run_after}
    values |= {"queue": "imports", "priority": -7, "trace_context": None}
    for number, row in enumerate(rows):
        values |= {f"{name}_{number}": value for name, value in row._asdict().items()}
    objects = _INSERT.objects(
        len(rows), Slots(_INSERT.fields(len(rows)), values), deferred=deferred
    )
    by_orm = _sent(lambda: Run.objects.bulk_create(objects, ignore_conflicts=True))
    Run.objects.all().delete()
    if not returns_rows("default"):
        # MariaDB inserts through bulk_create() itself (INSERT IGNORE), then reads.
        with CaptureQueriesContext(connection) as captured:
            insert("tests.walk", RunOrigin.API, rows, Route("imports", -7), run_after=run_after)
        assert captured.captured_queries[0]["sql"] == by_orm
        assert len(captured.captured_queries) == 2
        return
    inserted = _sent(lambda: _INSERT.run("default", values, rows, notify=False, deferred=deferred))
    assert inserted.split(" RETURNING ")[0] == by_orm


def test_w2_the_notifying_insert_is_the_same_insert_returning_its_notify():
    if connection.vendor != "postgresql":
        # W2: SQLite and MariaDB poll; nothing they send notifies.
        with CaptureQueriesContext(connection) as captured:
            start("tests.walk", instance="quiet")
        assert captured.captured_queries  # what it sent ...
        assert not [q for q in captured.captured_queries if "notify" in q["sql"].lower()]
        return
    plain = _INSERT.compiled("default", 1, notify=False, deferred=False).sql
    notifying = _INSERT.compiled("default", 1, notify=True, deferred=False).sql
    assert notifying == f"{plain}, pg_notify(%s, '')"


def test_s13_a_batch_insert_writes_the_rows_one_by_one_inserts_write(frozen_clock):
    """Unnest (arrays / JSON; MariaDB's bulk_create) against start()'s: every column alike."""
    one_by_one = [start("tests.walk", {"n": n}, instance=f"one{n}").run for n in range(3)]
    batch = [r.run for r in start_many("tests.walk", [(f"many{n}", {"n": n}) for n in range(3)])]
    per_row = set(Unnest.PER_ROW)
    for alone, among in zip(one_by_one, batch, strict=True):
        single, batched = Run.objects.get(pk=alone.pk), Run.objects.get(pk=among.pk)
        for field in FIELDS:
            if field not in per_row:
                assert getattr(single, field) == getattr(batched, field), field
        assert batched.payload == single.payload
        assert re.fullmatch(r"tests\.walk\|many\d", batched.live_key)


@pytest.mark.usefixtures("clock")
@pytest.mark.parametrize(
    "began", [None, True, False], ids=["any job", "begun (A8)", "recorded, clearing (A8)"]
)
@pytest.mark.parametrize("strict", [False, True], ids=["unlimited", "holding a slot"])
@pytest.mark.parametrize("exists", [False, True], ids=["new step", "retried step"])
def test_s13_a_step_record_sends_the_renewal_and_the_orms_record(exists, strict, began):
    """R5 + L7: on PostgreSQL one statement carrying both; elsewhere the same two, in turn.

    A pass holding a concurrency slot renews only an unexpired lease (C2): the
    same shapes, with that condition. A job not safe to repeat marks a step
    begun before it runs and clears the mark with its record (A8): the same
    shapes, with ``began_at``.
    """
    from django_leasejobs.models import Step
    from django_leasejobs.store.renewals import _step, record_step

    _STEP = _step(strict=strict, began=began)

    run = start("tests.walk", instance="steps").run
    assert claims.claim(run.pk, HELD["owner"], LEASE, "host:1:2:abc", takeover=False)
    values = {**HELD, "run_id": run.pk, "lease": LEASE, "name": "fetch", "result": '{"a":1}'}
    values |= {"attempts": 2, "error": "", "exists": exists, "strict": strict, "began": began}
    if exists:
        Step.objects.create(run_id=run.pk, name="fetch", attempts=1, recorded_at=run.started_at)
    renewal = _update_sent(_STEP.renewal, values)
    record = _STEP.record("default", exists=exists, values=values)
    if exists:
        queryset, update = record
        by_orm = _sent(lambda: queryset.update(**update))
    else:
        by_orm = _sent(lambda: Step.objects.create(**{f: getattr(record, f) for f in STEP}))
        Step.objects.filter(run_id=run.pk).delete()
    skipped = ("run_id", "owner", "exists", "strict", "began")
    arguments = {k: v for k, v in values.items() if k not in skipped}
    with CaptureQueriesContext(connection) as captured:
        record_step(run.pk, HELD["owner"], exists=exists, strict=strict, began=began, **arguments)
    sent = [q["sql"] for q in captured.captured_queries if not q["sql"].startswith("SAVEPOINT")]
    sent = [sql for sql in sent if not sql.startswith("RELEASE SAVEPOINT")]
    if connection.vendor != "postgresql":
        assert sent == [renewal, by_orm]
        return
    (carried,) = sent
    by_orm = by_orm.split(" RETURNING ")[0]  # the id of a created step: not needed here
    head, tail = by_orm.split(" VALUES (", 1) if not exists else (by_orm, "")
    recorded = (
        f"{by_orm} AND EXISTS (SELECT 1 FROM renewed)"
        if exists
        else f"{head} SELECT {tail.removesuffix(')')} FROM renewed"
    )
    assert carried == (
        f"WITH renewed AS ({renewal} RETURNING 1), recorded AS ({recorded}) "
        "SELECT count(*) FROM renewed"
    )


@pytest.mark.usefixtures("clock")
@pytest.mark.parametrize(
    "read", ["snapshot", "snapshot of queues", "dead holders", "dead holders of a queue"]
)
def test_s13_a_compiled_read_sends_and_returns_what_its_queryset_does(read):
    """D1's snapshot and L9's read of this host's leases: the SQL and the rows alike."""
    from django_leasejobs import driver

    due = start("tests.walk", instance="due").run
    held = start("tests.walk", instance="held").run
    assert claims.claim(held.pk, "owner-x", LEASE, "thishost:1:2:x", takeover=False)
    select, shape = {
        "snapshot": (driver.SNAPSHOT, (("tests.walk", "tests.noop"), None, 500)),
        "snapshot of queues": (driver.SNAPSHOT, (("tests.walk",), ("default", "other"), 500)),
        "dead holders": (driver.DEAD_HOLDERS, (("tests.walk",), None, "thishost:", 500)),
        "dead holders of a queue": (
            driver.DEAD_HOLDERS,
            (("tests.walk",), ("default", "x"), "thishost:", 9),
        ),
    }[read]
    with CaptureQueriesContext(connection) as compiled:
        rows = select.rows("default", *shape)
    with CaptureQueriesContext(connection) as by_orm:
        expected = list(select.queryset("default", *shape))
    assert [q["sql"] for q in compiled.captured_queries] == [
        q["sql"] for q in by_orm.captured_queries
    ]
    assert rows == expected
    if read.startswith("snapshot"):
        assert rows == [(due.pk, "tests.walk", False, None, "default")]  # the claimed: not due
    else:
        assert rows == [(held.pk, "owner-x", "thishost:1:2:x")]


@pytest.mark.usefixtures("clock")
@pytest.mark.parametrize("later", [False, True], ids=["due now", "run_after"])
def test_s13_a_started_run_is_the_run_a_queryset_reads_back(later):
    """start() and start_many() build the run from what they wrote and the time returned."""
    from django.utils import timezone

    run_after = timezone.now() + timedelta(hours=1) if later else None
    results = [
        start("tests.walk", {"n": 1}, instance="one", queue="q", priority=3, run_after=run_after),
        *start_many("tests.walk", [("a", [1]), ("b", None)], run_after=run_after),
    ]
    for result in results:
        stored = Run.objects.get(pk=result.run.pk)
        assert [getattr(result.run, f) for f in FIELDS] == [getattr(stored, f) for f in FIELDS]
        assert result.run._state.adding is False


@pytest.mark.usefixtures("clock")
@pytest.mark.parametrize("next_held", [True, False], ids=["next held", "next claim gone"])
def test_s13_a_finish_carrying_the_next_begin_sends_the_orms_two_updates(next_held):
    """L4 + R3: on PostgreSQL one statement of the two; elsewhere the same two, in one transaction.

    Each half is the ORM's own UPDATE for its run, fenced on its own owner token,
    and each answers for itself.
    """
    finishing = start("tests.walk", instance="finishing").run
    following = start("tests.walk", instance="following").run
    owner, next_owner = "owner-token-1", "owner-token-2"
    for run, token in ((finishing, owner), (following, next_owner)):
        assert claims.claim(run.pk, token, LEASE, "host:1:2:abc", takeover=False)
    assert claims.begin(finishing.pk, owner, LEASE / 4)
    then = next_begin.NextBegin(
        following.pk, next_owner if next_held else "someone-else", LEASE / 4
    )
    written = {"cursor": '{"page":3}', "counters": '{"seen":9}', "result": '{"rows":3}'}
    shape = {"done": True, "total": False, "drop_steps": False, "no_cursor": False}
    commit = commits.commit_statement(quiet=True, result=True, idle=False, **shape)
    values = {"run_id": finishing.pk, "owner": owner, "total": None, "idle_passes": None}
    finish_by_orm = _update_sent(commit, values | written)
    # Undo what the ORM's own UPDATEs wrote, so that the pair finds both runs as before.
    finished = Run.objects.filter(pk=finishing.pk)
    finished.update(status=RunStatus.RUNNING, lease_owner=owner, ended_at=None)
    begin_by_orm = _update_sent(
        claims.BEGIN, {"run_id": then.run_id, "owner": then.owner, "margin": then.margin}
    )
    Run.objects.filter(pk=following.pk).update(lease_began_at=None)
    with CaptureQueriesContext(connection) as captured:
        won, began = next_begin.commit_and_begin(
            commits.Written(finishing, owner, done=True, **written), then
        )
    assert (won, began) == (True, next_held)
    sent = [q["sql"] for q in captured.captured_queries]
    sent = [sql for sql in sent if "SAVEPOINT" not in sql and sql not in ("BEGIN", "COMMIT")]
    if connection.vendor == "postgresql":
        assert sent == [
            f"WITH first AS ({finish_by_orm} RETURNING 1), second AS ({begin_by_orm} RETURNING 1) "
            "SELECT (SELECT count(*) FROM first), (SELECT count(*) FROM second)"
        ]
    else:
        assert sent == [finish_by_orm, begin_by_orm]
    assert fresh(finishing).status == RunStatus.DONE
    assert (fresh(following).lease_began_at is not None) == next_held


@pytest.mark.usefixtures("clock")
@pytest.mark.parametrize("held", [True, False], ids=["lease held", "lease gone"])
@pytest.mark.parametrize("done", [False, True], ids=["advance", "finish"])
def test_r3_a_commit_that_drops_its_ledger_sends_the_orms_update_and_delete(done, held):
    """R3 + R5: on PostgreSQL the commit and the drop of its step ledger are one statement,
    the ledger dropped only where the commit won; elsewhere the two, in one transaction."""
    run = start("tests.walk", instance="stepped").run
    other = start("tests.walk", instance="other").run
    owner = "owner-token-1"
    assert claims.claim(run.pk, owner, LEASE, "host:1:2:abc", takeover=False)
    assert claims.begin(run.pk, owner, LEASE / 4)
    for each in (run, other):
        Step.objects.create(
            run_id=each.pk, name="s1", result="1", attempts=1, recorded_at=timezone.now()
        )
    Run.objects.filter(pk=run.pk).update(has_steps=True)
    shape = {"done": done, "total": False, "drop_steps": True, "no_cursor": False}
    written = {"cursor": '{"page":3}', "counters": '{"seen":9}', "result": None}
    values = {"run_id": run.pk, "owner": owner, "total": None, "idle_passes": None} | written
    commit_by_orm = _update_sent(
        commits.commit_statement(quiet=done, result=False, idle=False, **shape), values
    )
    drop_by_orm = _sent(lambda: Step.objects.filter(run_id=run.pk).delete())
    # Undo what the ORM wrote, so that the commit finds the run and its ledger as before.
    Run.objects.filter(pk=run.pk).update(
        status=RunStatus.RUNNING, lease_owner=owner if held else "someone-else", ended_at=None
    )
    Step.objects.create(
        run_id=run.pk, name="s1", result="1", attempts=1, recorded_at=timezone.now()
    )
    with CaptureQueriesContext(connection) as captured:
        won = commits.commit(
            commits.Written(
                run,
                owner,
                written["cursor"],
                written["counters"],
                done=done,
                drop_steps=True,
            )
        )
    assert won is held
    sent = [q["sql"] for q in captured.captured_queries]
    sent = [sql for sql in sent if "SAVEPOINT" not in sql and sql not in ("BEGIN", "COMMIT")]
    if connection.vendor == "postgresql":
        (drop_sql,) = re.findall(r"DELETE FROM .*", drop_by_orm)
        head = f"WITH committed AS ({commit_by_orm} RETURNING 1), dropped AS ({drop_sql}"
        assert (
            sent[0]
            == f"{head} AND EXISTS (SELECT 1 FROM committed)) SELECT count(*) FROM committed"
        )
        # A finish that lost tries the form a kick asked for, in a transaction of its own.
        assert len(sent) == (2 if done and not held else 1), sent
    elif held:
        assert sent == [commit_by_orm, drop_by_orm]
    assert Step.objects.filter(run_id=run.pk).exists() is not held
    assert Step.objects.filter(run_id=other.pk).exists()  # another run's ledger stands
    assert (fresh(run).status == RunStatus.DONE) is (done and held)


@pytest.mark.elsewhere(
    settings.DATABASES["default"]["ENGINE"].endswith("mysql"),
    reason="MariaDB's UPDATE returns no rows: its passes go the long way (test_going_on.py)",
)
@pytest.mark.usefixtures("clock")
@pytest.mark.parametrize("drop_steps", [False, True], ids=["no ledger", "ledger dropped"])
def test_l2_an_advance_going_on_reads_back_the_run_as_a_claim_reads_it(drop_steps):
    """R3 + L2 + L4: the advance that claims and begins the next pass returns the row as
    ``RETURNING`` reads it -- the run as a queryset reads it back -- and, on PostgreSQL,
    drops the ledger in the same statement (elsewhere in the same transaction)."""
    run, sent = _go_on(drop_steps)
    stored = Run.objects.get(pk=run.pk)
    assert [getattr(run, f) for f in FIELDS] == [getattr(stored, f) for f in FIELDS]
    assert (stored.lease_owner, stored.cursor, stored.has_steps) == ("owner-token-2", "1", False)
    assert stored.lease_began_at is not None
    assert not Step.objects.filter(run_id=run.pk).exists()
    if drop_steps and connection.vendor == "postgresql":
        assert len(sent) == 1
        assert sent[0].startswith("WITH committed AS (UPDATE")
        assert sent[0].endswith("SELECT * FROM committed")


def _go_on(drop_steps: bool) -> tuple[Run, list[str]]:
    run = start("tests.walk", instance="going on").run
    owner = "owner-token-1"
    assert claims.claim(run.pk, owner, LEASE, "host:1:2:abc", takeover=False)
    assert claims.begin(run.pk, owner, LEASE / 4)
    if drop_steps:
        Step.objects.create(run_id=run.pk, name="s1", result="1", recorded_at=timezone.now())
    then = next_pass.NextPass("owner-token-2", "host:1:2:abc", LEASE)
    with CaptureQueriesContext(connection) as captured:
        gone_on = next_pass.commit_and_go_on(
            commits.Written(run, owner, "1", "{}", drop_steps=drop_steps), then
        )
    assert gone_on is not None
    sent = [q["sql"] for q in captured.captured_queries]
    return gone_on, [
        sql for sql in sent if "SAVEPOINT" not in sql and sql not in ("BEGIN", "COMMIT")
    ]
