"""O3: OpenTelemetry spans for passes and steps, linked to the code that started the run (§16).

Where ``opentelemetry-api`` is importable, each pass is a span
(``leasejobs.pass <job>``; a Django task's run is named by its task's path,
:func:`~.known.known_as`) and each step a child span (``leasejobs.step
<name>``), from the site's own tracer provider -- the app never configures
one. ``start()``, ``start_many()`` and the tasks backend store the caller's
W3C trace context on the run (:func:`carrier`, through the site's global
propagator), and each pass's span links to it, so a request's trace leads
to the work it enqueued, however long after and on whatever machine the
work runs.

The attributes follow OpenTelemetry's messaging semantic conventions where
one fits -- ``messaging.system``, ``messaging.operation.type`` (``process``)
and ``.name``, ``messaging.destination.name`` (the queue),
``messaging.message.id`` (the run id) -- and name the rest
``leasejobs.*``: the job, the attempt, the outcome. A pass span is of kind
``CONSUMER``; the link, not a parent, ties it to its producer, as those
conventions say for work that is processed apart from where it was sent.

Without the package nothing is imported beyond one failed import, once, and
every function here returns at once.

Tracing is an extra: it never costs a pass (F12). Whatever the site's
tracer, span processor or propagator raises -- or a stored trace context
that cannot be read -- is caught here: the pass runs as if OpenTelemetry
were absent where it failed, and the failure is logged once per kind and
process (:func:`_failed`).
"""

from __future__ import annotations

import importlib
import json
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any

from .contained import failed_once
from .known import known_as

if TYPE_CHECKING:
    from .leases import Lease

__all__ = ["SYSTEM", "carrier", "finished", "pass_span", "step_span", "taken_over", "takeover_span"]

#: ``messaging.system``: no registered value fits a database-backed job queue.
SYSTEM = "django_leasejobs"

logger = logging.getLogger("django_leasejobs")

#: Looked up on first use, under ``_looking`` (see :func:`_otel`).
_modules: tuple[ModuleType, ModuleType] | None = None
_looked = False
_looking = threading.Lock()


def _failed(kind: str, exc: BaseException) -> None:
    """Log a failure of the site's tracing, once per *kind* and process (F12), as every
    integration's failure is (:func:`~.contained.failed_once`)."""
    failed_once(f"Tracing ({kind})", exc)


class _Contained(AbstractContextManager[Any]):
    """A span's context manager whose every failure is the tracer's, never the pass's (F12).

    A span that cannot start gives ``None`` (the pass runs untraced); one that
    cannot end lets the pass's own exception, if any, go on as it would have.
    """

    __slots__ = ("_inner", "_kind", "_open")

    def __init__(self, kind: str, open_span: Callable[[], AbstractContextManager[Any]]) -> None:
        self._kind = kind
        self._open = open_span
        self._inner: AbstractContextManager[Any] | None = None

    def __enter__(self) -> Any:
        try:
            inner = self._open()
            span = inner.__enter__()
        except Exception as exc:
            _failed(f"{self._kind} start", exc)
            return None
        self._inner = inner
        return span

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._inner is None:
            return
        try:
            self._inner.__exit__(kind, error, traceback)
        except Exception as exc:
            if exc is not error:
                _failed(f"{self._kind} end", exc)


def _otel() -> tuple[ModuleType, ModuleType] | None:
    """``(opentelemetry.trace, opentelemetry.propagate)``, or ``None`` without the package.

    Looked up once per process, under a lock, by name: pass threads start
    together, and on Python 3.11 a thread whose ``import opentelemetry.propagate``
    found the module loaded by another could read ``opentelemetry.propagate``
    before the package was bound to it (``AttributeError``, seen at
    ``--concurrency 4``). :func:`importlib.import_module` returns the module itself.
    """
    global _modules, _looked  # noqa: PLW0603 - looked up once per process, on first use
    if _looked:
        return _modules
    with _looking:
        if not _looked:
            try:
                trace = importlib.import_module("opentelemetry.trace")
                propagate = importlib.import_module("opentelemetry.propagate")
            except ImportError:
                _modules = None
            else:
                _modules = (trace, propagate)
            _looked = True
    return _modules


def carrier() -> str | None:
    """The current trace context as stored on a new run (JSON of W3C headers), or ``None``.

    ``None`` without OpenTelemetry, or outside any recording span: then the
    run's passes start traces of their own.
    """
    found = _otel()
    if found is None:
        return None
    trace, propagate = found
    try:
        if not trace.get_current_span().get_span_context().is_valid:
            return None
        headers: dict[str, str] = {}
        propagate.inject(headers)
        return json.dumps(headers, sort_keys=True) if headers else None
    except Exception as exc:  # the site's propagator: never a start()'s failure (F12)
        _failed("trace context", exc)
        return None


def _links(trace: ModuleType, propagate: ModuleType, stored: str | None) -> list[Any]:
    """A link to the span that started the run, from its stored context (none if unreadable)."""
    if not stored:
        return []
    try:
        headers = json.loads(stored)
        context = propagate.extract(headers if isinstance(headers, dict) else {})
        span_context = trace.get_current_span(context).get_span_context()
        return [trace.Link(span_context)] if span_context.is_valid else []
    except (ValueError, TypeError):
        return []  # a hand-edited row: the pass is traced all the same
    except Exception as exc:  # RecursionError from a row nested too deep, a propagator's bug
        _failed("stored trace context", exc)
        return []


#: What a span is without OpenTelemetry: nothing, at no cost.
_NOTHING: AbstractContextManager[None] = nullcontext()


def pass_span(lease: Lease) -> AbstractContextManager[Any]:
    """A span around one pass, linked to its run's starter; ``None`` without OpenTelemetry."""
    found = _otel()
    if found is None:
        return _NOTHING
    return _Contained("pass span", lambda: _pass_span(*found, lease, "leasejobs.pass"))


def takeover_span(lease: Lease) -> AbstractContextManager[Any]:
    """A span around a takeover that holds or fails the run without a pass (L3), like a pass's.

    No handler runs, so there would be no span at all; yet this is why the
    run stopped -- a worker killed or cut off mid-pass -- and a trace backend
    should show it, linked to the request that started the run.
    """
    found = _otel()
    if found is None:
        return _NOTHING
    return _Contained("takeover span", lambda: _pass_span(*found, lease, "leasejobs.takeover"))


@contextmanager
def _pass_span(trace: ModuleType, propagate: ModuleType, lease: Lease, name: str) -> Iterator[Any]:
    run = lease.run
    job = known_as(run.job, run.instance)  # a task run: its task's path (§9)
    tracer = trace.get_tracer("django_leasejobs")
    attributes = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": run.queue,
        "messaging.message.id": run.pk,
        "leasejobs.run.id": run.pk,
        "leasejobs.job": job,
        "leasejobs.attempt": run.attempts + 1,
    }
    with tracer.start_as_current_span(
        f"{name} {job}",
        kind=trace.SpanKind.CONSUMER,
        links=_links(trace, propagate, run.trace_context),
        attributes=attributes,
        record_exception=False,  # recorded by the pass, not once more on the way out
        set_status_on_exception=False,
    ) as span:
        yield span


def finished(span: Any, outcome: str, error: BaseException | None) -> None:
    """Note the pass's outcome on its *span*, and the handler's exception if it raised."""
    if span is None:
        return
    try:
        span.set_attribute("leasejobs.outcome", str(outcome))
        if error is not None:
            trace, _propagate = _otel() or (None, None)
            span.record_exception(error)
            if trace is not None:
                span.set_status(trace.Status(trace.StatusCode.ERROR, type(error).__name__))
    except Exception as exc:
        _failed("pass span", exc)


def taken_over(span: Any, outcome: str, code: str, note: str) -> None:
    """Note a takeover's outcome on its *span*: held or failed, with why, as an error."""
    if span is None:
        return
    try:
        span.set_attribute("leasejobs.outcome", str(outcome))
        span.set_attribute("leasejobs.failure_code", str(code))
        trace, _propagate = _otel() or (None, None)
        if trace is not None:
            span.set_status(trace.Status(trace.StatusCode.ERROR, note))
    except Exception as exc:
        _failed("takeover span", exc)


def step_span(name: str) -> AbstractContextManager[Any]:
    """A child span of the pass around one step; the step's exception recorded."""
    found = _otel()
    if found is None:
        return _NOTHING

    def open_span() -> AbstractContextManager[Any]:
        tracer = found[0].get_tracer("django_leasejobs")
        return tracer.start_as_current_span(  # type: ignore[no-any-return]
            f"leasejobs.step {name}", attributes={"leasejobs.step": name}
        )

    return _Contained("step span", open_span)
