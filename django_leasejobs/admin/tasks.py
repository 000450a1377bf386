"""Runs of Django tasks on the run pages (SPEC §8, §9): the call, what it returned, each attempt.

A task run is a run of the built-in job ``django_leasejobs.task`` whose
``instance`` is the task's path, so the list names it by that path and
filters and searches it along the ``(instance, id)`` index. Its detail page
reads it back as the framework does (:func:`~django_leasejobs.tasks.results.read_result`),
so the errors shown are the ones ``get_result()`` reports, including those
derived for an attempt whose worker died. A run that cannot be read so -- a
payload that holds no task call, a task that no longer imports -- still shows
what can be read, and why the rest cannot (A2).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from django_leasejobs import compat
from django_leasejobs.codec import Decoded
from django_leasejobs.errors import READ_ERRORS, unreadable_reason
from django_leasejobs.exceptions import TaskGone
from django_leasejobs.models import Run, TaskAttempt
from django_leasejobs.states import LeaseState, RunStatus
from django_leasejobs.tasks.envelope import Envelope
from django_leasejobs.tasks.options import TASK_JOB
from django_leasejobs.tasks.results import attempt_errors, read_result, run_errors

from .display import json_block, pre, table
from .times import db_now, moment_tag

__all__ = [
    "TASK_FIELDS",
    "TaskSection",
    "is_task_run",
    "task_fieldset",
    "task_search",
    "task_view",
    "what",
]

#: The detail page's task section, for task runs only.
TASK_FIELDS = (
    "task_path",
    "task_status",
    "task_backend",
    "task_run_after",
    "task_args",
    "task_kwargs",
    "task_return_value",
    "task_attempts",
)
#: How the list names a task run, and what a search may say before a task path.
TASK_PREFIX = "task:"


def is_task_run(run: Run | None) -> bool:
    return run is not None and run.job == TASK_JOB


def what(run: Run) -> str:
    """What a run is, as the list names it: its job, or ``task: <path>`` for a task run."""
    return f"{TASK_PREFIX} {run.instance}" if is_task_run(run) else run.job


def task_search(term: str) -> Q | None:
    """``task: PATH`` as the list shows it, as a lookup along the ``(instance, id)`` index."""
    if not term.startswith(TASK_PREFIX):
        return None
    return Q(job=TASK_JOB, instance=term.removeprefix(TASK_PREFIX).strip())


# -- the detail page -------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskView:
    """A task run as its page shows it: the call, the result, the attempts, or why not."""

    envelope: Envelope | None
    result: Any  # the framework's TaskResult, when the run reads back as one
    attempts: Sequence[TaskAttempt] | None
    problem: str | None = None


def task_view(run: Run) -> TaskView:
    """*run* read back as a task, once per page (each field of the section asks)."""
    view: TaskView | None = vars(run).get("_leasejobs_task")
    if view is None:
        view = vars(run)["_leasejobs_task"] = _read(run)
    return view


def _read(run: Run) -> TaskView:
    problem: str | None = None
    try:
        result = read_result(run.pk)
    except Run.DoesNotExist:
        result, problem = None, str(_("the run is no longer stored as a task run"))
    except (TaskGone, ValueError) as exc:  # no task call in the payload, or no such task now
        result, problem = None, str(exc)
    except READ_ERRORS as exc:
        result, problem = None, unreadable_reason(exc)
    attempts: list[TaskAttempt] | None
    try:
        attempts = list(_attempts_of(run))
    except READ_ERRORS as exc:
        attempts, problem = None, "; ".join(filter(None, [problem, _gone(exc)]))
    return TaskView(_envelope(run), result, attempts, problem)


def _envelope(run: Run) -> Envelope | None:
    """The call *run*'s payload holds, whether or not its task still imports."""
    decoded = run.decoded_payload()
    try:
        return Envelope.read(decoded.value) if decoded.ok else None
    except ValueError:
        return None


def _attempts_of(run: Run) -> QuerySet[TaskAttempt]:
    return TaskAttempt.objects.using(run._state.db).filter(run_id=run.pk).order_by("pk")


def _gone(exc: BaseException) -> str:
    return str(_("the attempts cannot be read: %(reason)s") % {"reason": unreadable_reason(exc)})


def _em(text: Any) -> SafeString:
    return format_html("<em>{}</em>", text)


def _problem(text: str) -> SafeString:
    return format_html(
        '<strong class="leasejobs-task-problem" style="color:#b91c1c">{}</strong>', text
    )


def attempt_rows(run: Run, view: TaskView) -> list[tuple[Any, ...]]:
    """One row per attempt -- worker id, began at, error class, traceback -- then the run's own.

    The errors are :func:`~django_leasejobs.tasks.results.attempt_errors`' --
    the ones ``get_result()`` reports -- so they show even for a task that no
    longer imports.
    """
    attempts = list(view.attempts or ())
    current = _in_flight(run, view)
    per_attempt = attempt_errors(run, attempts, current=current)
    rows: list[tuple[Any, ...]] = []
    for number, (attempt, error) in enumerate(zip(attempts, per_attempt, strict=True), 1):
        note = None
        if error is None and number == len(attempts):
            note = _("in flight") if current else _("returned")
        rows.append(
            (
                number,
                attempt.worker_id,
                moment_tag(attempt.began_at),
                *_error_cells(attempt, error, note),
            )
        )
    for error in run_errors(run, per_attempt):  # a cancel, or a failure no attempt shows
        rows.append((_em(_("the run")), "—", "—", error.exception_class_path, pre(error.traceback)))
    return rows


def _in_flight(run: Run, view: TaskView) -> bool:
    """Whether the last attempt is the pass in flight: as read back, else by the run's lease,
    held by the database's clock (L1, A8)."""
    if view.result is not None:
        return bool(view.result.status == compat.TaskResultStatus.RUNNING)
    return run.lease_state(db_now(run)) == LeaseState.LEASED


def _error_cells(attempt: TaskAttempt, error: Any, note: Any) -> tuple[Any, Any]:
    if attempt.error_class:
        return attempt.error_class, pre(attempt.traceback)
    if error is not None:  # derived: the attempt itself recorded nothing
        derived = format_html("{} <em>({})</em>", error.exception_class_path, _("derived"))
        return derived, pre(error.traceback)
    return "—", _em(note) if note else "—"


class TaskSection:
    """The detail page's "Task" section, shown for task runs (SPEC §9)."""

    @admin.display(description=_("task"))
    def task_path(self, run: Run) -> str:
        view = task_view(run)
        return view.envelope.task if view.envelope is not None else run.instance

    @admin.display(description=_("task status"))
    def task_status(self, run: Run) -> SafeString | str:
        view = task_view(run)
        if view.problem is not None:
            return format_html(
                "{} {}", _problem(str(_("Cannot be read as a task result:"))), view.problem
            )
        return str(getattr(view.result.status, "label", view.result.status))

    @admin.display(description=_("backend"))
    def task_backend(self, run: Run) -> str:
        view = task_view(run)
        return view.envelope.backend if view.envelope is not None else "—"

    @admin.display(description=_("run after"))
    def task_run_after(self, run: Run) -> SafeString | str:
        view = task_view(run)
        after = view.envelope.run_after if view.envelope is not None else None
        return moment_tag(after)

    @admin.display(description=_("args"))
    def task_args(self, run: Run) -> SafeString | str:
        return self._call_part(run, "args")

    @admin.display(description=_("kwargs"))
    def task_kwargs(self, run: Run) -> SafeString | str:
        return self._call_part(run, "kwargs")

    def _call_part(self, run: Run, name: str) -> SafeString | str:
        view = task_view(run)
        if view.envelope is None:
            return _em(_("the payload holds no task call: see the payload below"))
        # Too deep to pretty-print: json_block shows the payload it came from.
        return json_block(Decoded(getattr(view.envelope, name), raw=run.payload))

    @admin.display(description=_("return value"))
    def task_return_value(self, run: Run) -> SafeString | str:
        if run.status == RunStatus.DONE:
            return json_block(run.decoded_result())
        if run.status in (RunStatus.RUNNING, RunStatus.HELD):
            return _em(_("not returned yet"))
        return _em(_("none: the task did not return"))

    @admin.display(description=_("task attempts"))
    def task_attempts(self, run: Run) -> SafeString | str:
        view = task_view(run)
        if view.attempts is None:
            return _problem(view.problem or "")
        headers = (_("#"), _("worker id"), _("began at"), _("error class"), _("traceback"))
        return table(headers, attempt_rows(run, view))


def task_fieldset() -> tuple[Any, dict[str, Any]]:
    return (_("Task"), {"fields": TASK_FIELDS})
