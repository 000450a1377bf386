"""O3 (revision 3): a span per pass and per step, linked to the span that started the run.

Spans are captured with the OpenTelemetry SDK's in-memory exporter, set up
here as a site would set up its own tracer provider.
"""

from __future__ import annotations

import json
import sys

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from django_leasejobs import Retry, contained, start, start_many, tracing
from django_leasejobs.models import Run
from tests.utils import fresh

pytestmark = pytest.mark.django_db


class _Gated(SimpleSpanProcessor):
    """Exports only while a test here records: the provider stays for the whole process."""

    recording = False

    def on_end(self, span):
        if self.recording:
            super().on_end(span)


class _Failing(SpanProcessor):
    """A site's span processor with a bug (F12): raises where a test says, else nothing."""

    raises_on: str | None = None

    def on_start(self, span, parent_context=None):
        if self.raises_on == "start":
            raise RuntimeError("the site's span processor failed on start")

    def on_end(self, span):
        if self.raises_on == "end":
            raise RuntimeError("the site's span processor failed on end")


_EXPORTER = InMemorySpanExporter()
_GATE = _Gated(_EXPORTER)
_FAILING = _Failing()
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(_GATE)
_PROVIDER.add_span_processor(_FAILING)
# The global provider can be set once per process: the tests share this one.
trace.set_tracer_provider(_PROVIDER)
SITE = trace.get_tracer("the.site")


@pytest.fixture
def spans():
    _EXPORTER.clear()
    _GATE.recording = True
    yield _EXPORTER
    _GATE.recording = False
    _EXPORTER.clear()


def _named(exporter, prefix):
    return [span for span in exporter.get_finished_spans() if span.name.startswith(prefix)]


def test_o3_a_pass_is_a_span_with_the_run_and_its_steps_are_children(define, drive, spans):
    def handler(p):
        p.step("fetch", lambda: 1)
        p.step("save", lambda: 2)
        return p.done()

    spec = define("t.o3.steps", handler, queue="imports")
    run = start(spec).run
    drive(spec)
    (pass_span,) = _named(spans, "leasejobs.pass ")
    assert pass_span.name == "leasejobs.pass t.o3.steps"
    assert pass_span.kind is SpanKind.CONSUMER
    attributes = dict(pass_span.attributes)
    assert attributes["leasejobs.run.id"] == run.pk
    assert attributes["messaging.message.id"] == run.pk
    assert attributes["leasejobs.job"] == spec.name
    assert attributes["messaging.system"] == "django_leasejobs"
    assert attributes["messaging.operation.type"] == "process"
    assert attributes["messaging.destination.name"] == "imports"
    assert attributes["leasejobs.attempt"] == 1
    assert attributes["leasejobs.outcome"] == "completed"
    steps = _named(spans, "leasejobs.step ")
    assert [span.name for span in steps] == ["leasejobs.step fetch", "leasejobs.step save"]
    for step in steps:
        assert step.parent.span_id == pass_span.context.span_id
        assert step.context.trace_id == pass_span.context.trace_id


def test_o3_the_handlers_exception_is_recorded_on_the_pass_span(define, drive, spans):
    def handler(p):
        raise RuntimeError("upstream said no")

    spec = define("t.o3.fails", handler)
    start(spec)
    drive(spec)
    (pass_span,) = _named(spans, "leasejobs.pass ")
    assert pass_span.status.status_code is StatusCode.ERROR
    (event,) = [event for event in pass_span.events if event.name == "exception"]
    assert event.attributes["exception.type"].endswith("RuntimeError")
    assert dict(pass_span.attributes)["leasejobs.outcome"] == "retrying"


def test_o3_a_failed_step_is_recorded_on_its_own_span(define, drive, spans):
    def handler(p):
        p.step("flaky", lambda: 1 / 0)
        return p.done()

    spec = define("t.o3.step_fails", handler)
    start(spec)
    drive(spec)
    (step,) = _named(spans, "leasejobs.step ")
    assert step.status.status_code is StatusCode.ERROR
    assert any(event.name == "exception" for event in step.events)


def test_o3_the_pass_links_to_the_span_that_started_its_run(define, drive, spans):
    spec = define("t.o3.linked", lambda p: p.done())
    with SITE.start_as_current_span("POST /imports") as request:
        run = start(spec, instance="a").run
        many = start_many(spec, [("b", None), ("c", None)])
    stored = json.loads(fresh(run).trace_context)
    assert stored["traceparent"].split("-")[1] == format(
        request.get_span_context().trace_id, "032x"
    )
    assert {fresh(result.run).trace_context for result in many} == {fresh(run).trace_context}
    drive(spec)
    passes = _named(spans, "leasejobs.pass ")
    assert len(passes) == 3
    for pass_span in passes:
        (link,) = pass_span.links
        assert link.context.trace_id == request.get_span_context().trace_id
        assert link.context.span_id == request.get_span_context().span_id
        # A trace of its own: linked to the request, not a child of it.
        assert pass_span.context.trace_id != request.get_span_context().trace_id


def test_o3_a_task_enqueued_in_a_request_is_linked_to_it(drive, spans):
    from tests.tasks import add

    with SITE.start_as_current_span("POST /tasks") as request:
        result = add.enqueue(1, 2)
    from django_leasejobs.models import Run

    assert Run.objects.get(pk=result.id).trace_context
    drive("django_leasejobs.task")
    (pass_span,) = _named(spans, "leasejobs.pass ")
    assert pass_span.links[0].context.trace_id == request.get_span_context().trace_id


def test_o3_outside_any_span_nothing_is_stored_and_a_bad_stored_context_is_ignored(
    define, drive, spans
):
    spec = define("t.o3.plain", lambda p: p.done())
    run = start(spec).run
    assert fresh(run).trace_context is None
    other = start(spec, instance="edited").run
    type(other).objects.filter(pk=other.pk).update(trace_context="{not json")
    drive(spec)
    passes = _named(spans, "leasejobs.pass ")
    assert len(passes) == 2
    assert all(not span.links for span in passes)


def test_o3_without_opentelemetry_nothing_is_imported_and_nothing_is_stored(
    define, drive, monkeypatch
):
    monkeypatch.setattr(tracing, "_looked", False)
    for name in [m for m in sys.modules if m.startswith("opentelemetry")]:
        monkeypatch.setitem(sys.modules, name, None)  # as if the package were not installed
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    try:
        spec = define("t.o3.absent", lambda p: p.step("s", lambda: 1) and p.done())
        with SITE.start_as_current_span("a request"):
            run = start(spec).run
        assert tracing._otel() is None
        assert fresh(run).trace_context is None
        assert drive(spec).completed == 1
    finally:
        monkeypatch.undo()
        tracing._looked = False


def test_o3_opentelemetry_is_found_while_another_thread_still_binds_its_package(monkeypatch):
    """O3 at ``--concurrency 4`` (seen in CI, Python 3.11): a pass thread looked the modules
    up while another thread's import of ``opentelemetry.propagate`` had loaded the module
    but not yet bound the package to it -- ``AttributeError: module 'opentelemetry' has
    no attribute 'propagate'``, and the run could not be driven. That moment, held still:
    the module is in ``sys.modules``, the package's attribute is not yet there."""
    import opentelemetry
    import opentelemetry.propagate

    monkeypatch.setattr(tracing, "_looked", False)
    monkeypatch.delattr(opentelemetry, "propagate")
    try:
        assert tracing._otel() == (trace, sys.modules["opentelemetry.propagate"])
    finally:
        monkeypatch.undo()
        tracing._looked = False


@pytest.mark.parametrize(
    ("options", "outcome", "code"),
    [
        ({"safe_to_repeat": False}, "held", "interrupted"),
        ({"retry": Retry(max_attempts=1)}, "failed", "lease_expired"),
    ],
    ids=["held", "failed"],
)
def test_o2_o3_a_takeover_that_holds_or_fails_a_run_is_a_span_linked_like_a_pass(
    define, drive, spans, frozen_clock, options, outcome, code
):
    """Revision 4: no pass follows such a takeover (L3), yet it is why the run stopped."""
    from tests.test_leases import LEASE, _abandon

    calls = []
    spec = define("t.o3.takeover", lambda p: calls.append(1) or p.done(), lease=LEASE, **options)
    with SITE.start_as_current_span("POST /charges") as request:
        run = start(spec).run
    _abandon(run, frozen_clock, began=True)
    assert getattr(drive(spec), outcome) == 1
    assert calls == []
    assert _named(spans, "leasejobs.pass ") == []
    (span,) = _named(spans, "leasejobs.takeover ")
    assert span.name == "leasejobs.takeover t.o3.takeover"
    assert span.kind is SpanKind.CONSUMER
    attributes = dict(span.attributes)
    assert attributes["leasejobs.run.id"] == run.pk
    assert attributes["leasejobs.outcome"] == outcome
    assert attributes["leasejobs.failure_code"] == code
    assert span.status.status_code is StatusCode.ERROR
    assert "worker killed or cut off" in span.status.description
    (link,) = span.links
    assert link.context.span_id == request.get_span_context().span_id


# -- F12: tracing never costs a pass ---------------------------------------------------------


@pytest.fixture
def failing_tracing(monkeypatch):
    """The site's span processor raises where the test says; failures logged afresh."""
    monkeypatch.setattr(contained, "_logged", set())
    yield _FAILING
    _FAILING.raises_on = None


@pytest.mark.parametrize("where", ["start", "end"])
def test_f12_a_span_processor_that_raises_leaves_the_pass_to_run_and_settle(
    define, drive, failing_tracing, caplog, where
):
    calls = []

    def handler(p):
        calls.append(p.attempt)
        p.step("fetch", lambda: 1)
        return p.done()

    spec = define("t.f12.processor", handler, retry=Retry(max_attempts=1))
    runs = [start(spec, instance=f"r{n}").run for n in range(2)]
    failing_tracing.raises_on = where
    report = drive(spec)
    assert (report.completed, report.failed, report.errors) == (2, 0, [])
    assert calls == [1, 1]
    assert {fresh(run).status for run in runs} == {"done"}
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Tracing (")]
    # Once per kind and process, however many passes and steps met it.
    assert sorted(line.split(")")[0] for line in logged) == [
        f"Tracing (pass span {where}",
        f"Tracing (step span {where}",
    ]


def test_f12_a_stored_trace_context_that_cannot_be_read_leaves_the_pass_traced_alone(
    define, drive, spans, caplog
):
    spec = define("t.f12.context", lambda p: p.done(), retry=Retry(max_attempts=1))
    run = start(spec).run
    Run.objects.filter(pk=run.pk).update(trace_context="[" * 100_000 + "]" * 100_000)
    assert drive(spec).completed == 1
    (pass_span,) = _named(spans, "leasejobs.pass ")
    assert pass_span.links == ()
    assert any("stored trace context" in r.getMessage() for r in caplog.records)


def test_f12_a_propagator_that_raises_leaves_start_to_write_the_run(monkeypatch, caplog):
    from opentelemetry import propagate

    def broken(*args, **kwargs):
        raise RuntimeError("the site's propagator failed")

    monkeypatch.setattr(contained, "_logged", set())
    monkeypatch.setattr(propagate, "inject", broken)
    with SITE.start_as_current_span("POST /imports"):
        run = start("tests.noop", instance="propagated").run
    assert fresh(run).trace_context is None
    assert any("trace context" in r.getMessage() for r in caplog.records)
