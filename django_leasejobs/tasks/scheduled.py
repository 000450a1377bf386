"""Scheduled tasks: ``@task(schedule="<cron>", timezone=..., missed=...)`` (SPEC §9, §7).

A scheduled task is a job of the registry named by the task's module path
(``shop.tasks.nightly_report``), defined when its module is imported, as
``@job(schedule=...)`` defines one. So its ``Schedule`` row, its missed-run
ledger and every run its schedule starts are named by that path, and every
§7 rule holds for it exactly as for a scheduled job -- one definition of
firing (S2), the missed-run rules (S3), pause and resume (S4), run now (S5)
and the states (S6), with the admin's schedule pages -- with no second
schedule machinery to keep in step.

Each run is one call of the task, run as a task run's pass is
(:func:`~.execution.run_task`): its attempt recorded, ``task_started`` and
``task_finished`` sent (not ``task_enqueued``: no caller enqueued it), its
``TaskContext`` given when it ``takes_context``, under its backend's
``OPTIONS`` and its own ``retry``/``max_attempts``/``backoff``/``timeout``/
``safe_to_repeat``. Its ``TaskResult`` reads back
by the run's id like an enqueued one's (:func:`envelope_of`). The run's
payload is the schedule's own (``due``, ``covers``), not a call: a
scheduled task takes no arguments, and one that does is refused at
decoration.

Every process imports the modules the backend's ``OPTIONS["SCHEDULED_TASKS"]``
lists when the app is ready (:func:`import_listed`), so a drive that knows
the backend knows its schedules; one that does not import is
``leasejobs.E104`` in ``manage.py check``.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django_leasejobs import compat
from django_leasejobs.errors import describe
from django_leasejobs.exceptions import DuplicateJob, InvalidJob
from django_leasejobs.registry import Job, registry

from .envelope import Envelope
from .options import TASK_JOB

if TYPE_CHECKING:
    from django_leasejobs.models import Run
    from django_leasejobs.passes import Pass, PassResult

    from .options import LeaseJobsTask, TaskOptions

__all__ = [
    "ScheduledTask",
    "define",
    "envelope_of",
    "import_listed",
    "import_problem",
    "is_scheduled",
    "names",
    "per_run",
]

logger = logging.getLogger("django_leasejobs")


class ScheduledTask:
    """The handler of a scheduled task's job: the task's path, function and backend alias.

    It reads as the task's function (``__module__``, ``__qualname__``), so the
    job's origin is the task's and a ``@job`` of the same name is refused as
    a duplicate. Each pass calls the task through :func:`per_run`; called
    directly -- outside a drive -- it runs the task the same way.
    """

    def __init__(self, path: str, func: Callable[..., Any], backend: str) -> None:
        self.path = path
        self.func = func
        self.backend = backend
        self.__module__ = func.__module__
        self.__qualname__ = func.__qualname__

    def __call__(self, p: Pass) -> PassResult | None:
        from django_leasejobs.store.base import runs  # not at the top: the models

        return per_run(runs().get(pk=p.run.id)).handler(p)


def define(task: LeaseJobsTask, options: TaskOptions) -> None:
    """Register scheduled *task* as the job named by its path, under *options* (at decoration).

    Called by the backend that accepts the task (``validate_task``), with its
    ``OPTIONS`` as the task overrides them.

    Raises ``InvalidTask`` naming the task: a task that takes arguments, a
    schedule or rule a job would refuse, a job of that name already
    registered by other code.
    """
    path = task.module_path
    known = registry.get(path) if path in registry else None
    if known is not None and getattr(known.handler, "func", None) is task.func:
        return  # the same task again: a copy from .using(), which never changes the schedule
    if needed := _arguments(task):
        raise compat.InvalidTask(
            f"task {path}: a scheduled task takes no arguments, but {needed} "
            f"{'has' if ',' not in needed else 'have'} no default "
            "(each due time calls it with none)"
        )
    values: dict[str, Any] = {"missed": task.missed} if task.missed is not None else {}
    try:
        registry.register(
            Job(
                name=path,
                handler=ScheduledTask(path, task.func, task.backend),
                lease=options.lease,
                retry=options.retry,
                timeout=options.timeout,
                schedule=task.schedule,
                timezone=task.timezone,
                safe_to_repeat=options.safe_to_repeat,
                queue=task.queue_name,
                priority=task.priority,
                heartbeat=True,
                per_run=per_run,
                **values,
            )
        )
    except (InvalidJob, DuplicateJob) as exc:
        raise compat.InvalidTask(f"task {path}: {exc.problem}") from exc


def _arguments(task: LeaseJobsTask) -> str | None:
    """The parameters *task* cannot be called without (its context aside), named; or ``None``."""
    parameters = list(inspect.signature(task.func).parameters.values())
    if task.takes_context:
        parameters = parameters[1:]
    kinds = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    needed = [
        param.name
        for param in parameters
        if param.kind not in kinds and param.default is inspect.Parameter.empty
    ]
    return ", ".join(repr(name) for name in needed) or None


def is_scheduled(job: str) -> bool:
    """Whether *job* is a scheduled task's job registered in this process."""
    return job in registry and isinstance(registry.get(job).handler, ScheduledTask)


def names() -> list[str]:
    """The jobs of the scheduled tasks registered in this process."""
    return [spec.name for spec in registry if isinstance(spec.handler, ScheduledTask)]


def envelope_of(run: Run) -> Envelope | None:
    """The call a scheduled task's *run* stands for -- the task, no arguments -- or ``None``."""
    if not is_scheduled(run.job):
        return None
    handler = registry.get(run.job).handler
    assert isinstance(handler, ScheduledTask)
    return Envelope(handler.path, [], {}, handler.backend)


def per_run(run: Run) -> Job:
    """A scheduled task's job as claimed *run*'s pass runs it: the task call, its options.

    As a run of the built-in job runs: by its ``per_run``
    (:func:`~.execution.per_run`), found in the registry when the pass is
    admitted. Not imported: the built-in job runs tasks, and this module is
    imported as a task is defined, with no models loaded yet.
    """
    resolve = registry.get(TASK_JOB).per_run
    assert resolve is not None  # the built-in job always has one
    return resolve(run)


def import_listed(modules: tuple[str, ...]) -> None:
    """Import the modules ``OPTIONS["SCHEDULED_TASKS"]`` lists, defining their schedules.

    One that does not import is logged and skipped: ``manage.py check``
    reports it (``leasejobs.E104``), and the rest still define theirs.
    """
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:
            logger.error("SCHEDULED_TASKS module %s does not import: %s", module, describe(exc))


def import_problem(module: str) -> str | None:
    """Why *module* does not import, or ``None`` when it does (``leasejobs.E104``)."""
    try:
        importlib.import_module(module)
    except Exception as exc:
        return describe(exc)
    return None
