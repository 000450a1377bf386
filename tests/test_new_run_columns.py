"""Every way a run is made writes a new run's columns alike, the starter's trace included.

A run is inserted by several statements: ``start()``'s one-row ``INSERT``,
``start_many()``'s batch, the task backend's enqueue (``start()``'s statement,
another origin), a kick's follow-up, started inside the commit that frees its
key -- and on MariaDB, where no ``INSERT`` returns its rows, an ``INSERT
IGNORE`` and a read. What a new run's columns are is written once
(:func:`~django_leasejobs.store.base.new_run`); these tests hold each way to
it, so a column added to one way and forgotten in another shows here. The
follow-up once left out the trace context (O3): its passes were linked to
nothing.
"""

from __future__ import annotations

import json

import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from django_leasejobs import start, start_many
from django_leasejobs.known import TASK_JOB
from django_leasejobs.models import Run
from django_leasejobs.states import RunOrigin, RunStatus
from tests.utils import fresh

pytestmark = pytest.mark.django_db

#: The caller's span: what a request's trace would be (O3). A non-recording span
#: needs no tracer provider, so the trace id stored is this one whatever the
#: process's provider -- a pass's span inside it, recorded or not, keeps its trace.
CALLER = SpanContext(
    trace_id=0x4BF92F3577B34DA6A3CE929D0E0E4736,
    span_id=0x00F067AA0BA902B7,
    is_remote=False,
    trace_flags=TraceFlags(TraceFlags.SAMPLED),
)

#: The columns a way of making a run gives from its own call: who, where, what.
#: Every other column is what any new run has, and must be alike for every way.
GIVEN = {"id", "job", "instance", "payload", "origin", "queue", "priority", "live_key"}
#: The times a new run due now is stamped with: the statement's own "now", all three.
STAMPED = ("started_at", "updated_at", "next_attempt_at")


def _made_every_way(define, drive):
    """One run made each way, inside the caller's span: ``{way: run as stored}``."""
    from tests.tasks import add

    spec = define("t.new_run_columns", lambda p: p.done())
    # Its own job, so that the drive passes the kicked run alone.
    kicks = define("t.new_run_columns.kicked", lambda p: p.done())
    with trace.use_span(NonRecordingSpan(CALLER)):
        started = start(spec, {"v": 1}, instance="start").run
        batch = [result.run for result in start_many(spec, [("many-1", 1), ("many-2", 2)])]
        enqueued = Run.objects.get(pk=add.enqueue(1, 2).id)
        kicked = start(kicks, {"v": 1}).run
        start(kicks, {"v": 2}, again=True)
        drive(kicks)  # the kicked run's pass finishes, and its commit starts the follow-up
    follow_up = Run.objects.get(job=kicks.name, origin=RunOrigin.FOLLOW_UP)
    assert kicked.pk != follow_up.pk
    return {
        "start()": fresh(started),
        "start_many()": fresh(batch[0]),
        "start_many(), its second row": fresh(batch[1]),
        "the task backend's enqueue": enqueued,
        "a kick's follow-up": follow_up,
    }


def _trace_id(run: Run) -> str | None:
    """The trace id of the context stored on *run* (its ``traceparent``'s second field)."""
    if run.trace_context is None:
        return None
    return json.loads(run.trace_context)["traceparent"].split("-")[1]


def test_o3_every_way_of_making_a_run_stores_the_trace_of_the_code_that_made_it(
    define, drive, frozen_clock
):
    """O3: each run's passes link to the trace it was made in, whichever way it was made."""
    made = _made_every_way(define, drive)
    expected = format(CALLER.trace_id, "032x")
    assert {way: _trace_id(run) for way, run in made.items()} == dict.fromkeys(made, expected)


def test_r1_every_way_of_making_a_run_writes_a_new_runs_columns_alike(define, drive, frozen_clock):
    """R1: a new run is live and due now, with nothing of a pass on it, however it was made.

    Apart from what each call gives (:data:`GIVEN`) and the trace's span, the
    rows are column for column the same; each is stamped with one "now".
    """
    made = _made_every_way(define, drive)
    assert made["the task backend's enqueue"].job == TASK_JOB
    rest = {
        way: {
            field.attname: getattr(run, field.attname)
            for field in Run._meta.concrete_fields
            if field.attname not in GIVEN | {"trace_context"}
        }
        for way, run in made.items()
    }
    first = rest["start()"]
    assert first["status"] == RunStatus.RUNNING
    assert {way: columns == first for way, columns in rest.items()} == dict.fromkeys(made, True)
    for way, run in made.items():
        assert len({getattr(run, name) for name in STAMPED}) == 1, way
