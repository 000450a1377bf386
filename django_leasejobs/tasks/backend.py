"""``LeaseJobsBackend``: Django's task framework on leased, fenced runs (SPEC §9).

``enqueue()`` is one ``INSERT`` of a run of the built-in job
``django_leasejobs.task`` on the caller's connection, inside the caller's
transaction; any ``rundueJobs`` drives it (:mod:`.execution`);
``get_result()`` reads it back (:mod:`.results`).

This module imports no models at its top: a ``@task`` in a module that
Django imports while it is still loading apps builds this backend then, and
``validate_task()`` defines a scheduled task's job (:mod:`.scheduled`). The
models come in with :mod:`.results` and the store, inside the methods that
read or write runs. Nothing here runs a task: the modules that do
(:mod:`.execution`, :mod:`.calls`, :mod:`.finished`) stand above this one
and find its instances through :mod:`.aliases`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from django.apps import apps
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from django_leasejobs import compat, signals
from django_leasejobs.codec import encode
from django_leasejobs.exceptions import TaskGone
from django_leasejobs.ids import ID_PATTERN, new_id
from django_leasejobs.policy import MAX_DELAY
from django_leasejobs.routing import queue_problem
from django_leasejobs.states import RunOrigin

from . import scheduled
from .envelope import Envelope
from .options import TASK_JOB, LeaseJobsTask, TaskOptions

__all__ = ["LeaseJobsBackend"]

#: A run id, as :mod:`~django_leasejobs.ids` mints them.
RUN_ID = re.compile(ID_PATTERN)

#: ``leasejobs.E100``, in the words ``check()`` and ``enqueue()`` both use.
NOT_INSTALLED = (
    "{where} uses django_leasejobs.tasks.LeaseJobsBackend, but 'django_leasejobs' "
    "is not in INSTALLED_APPS: its runs have no table."
)
NOT_INSTALLED_HINT = "Add 'django_leasejobs' to INSTALLED_APPS and run migrate."

#: What ``QUEUES`` may be. The framework makes a set of it, so the str
#: ``"default"`` would be the queues ``"d"``, ``"e"``, ``"f"``...
QUEUE_COLLECTIONS = (list, tuple, set, frozenset)


def queues_problem(queues: object) -> str | None:
    """What is wrong with *queues* as an alias's ``QUEUES`` as a whole, or ``None``."""
    if isinstance(queues, QUEUE_COLLECTIONS):
        return None
    return (
        f"QUEUES must be a list, tuple or set of queue names, "
        f"got {type(queues).__name__} {queues!r}"
    )


class LeaseJobsBackend(compat.BaseTaskBackend):
    """The production backend: each task a run with a lease, retries and a heartbeat.

    ``TASKS = {"default": {"BACKEND": "django_leasejobs.tasks.LeaseJobsBackend"}}``.
    ``OPTIONS``: ``RETRY`` (a :class:`~django_leasejobs.Retry` or its keyword
    dict; default one attempt), ``LEASE`` and ``TIMEOUT`` (timedeltas or
    seconds), ``SAFE_TO_REPEAT`` (default ``True``; ``False`` holds a task
    whose worker died mid-call for an operator), ``SCHEDULED_TASKS`` (the
    modules of scheduled tasks, imported when the app is ready).
    """

    task_class = LeaseJobsTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        # OPTIONS and QUEUES are read here only, and never raise: check() reports them.
        self.queues_given = params.get("QUEUES", [compat.DEFAULT_TASK_QUEUE_NAME])
        self.queues_problem = queues_problem(self.queues_given)
        if self.queues_problem is not None:
            # Not the framework's set of whatever it was (a str's letters): no queue,
            # and validate_task() refuses every task with the reason.
            params = {**params, "QUEUES": []}
        super().__init__(alias, params)
        self.task_options = TaskOptions.read(params.get("OPTIONS", {}))

    def _where(self) -> str:
        return f"TASKS[{self.alias!r}]"

    def _require_app(self) -> None:
        """Refuse in E100's words, before any model is imported (whose error would not say why)."""
        if not apps.is_installed("django_leasejobs"):
            message = NOT_INSTALLED.format(where=self._where())
            raise ImproperlyConfigured(f"{message} {NOT_INSTALLED_HINT}")

    # -- enqueue -------------------------------------------------------------------------

    def validate_task(self, task: compat.AnyTask) -> None:
        if self.queues_problem is not None:  # E103: no queue name is in such QUEUES
            raise compat.InvalidTask(f"{self._where()}: {self.queues_problem}")
        super().validate_task(task)
        if type(task.priority) is not int:  # SPEC §2: 5.0 or True is not a priority
            raise compat.InvalidTask(f"priority must be an int, got {task.priority!r}")
        if problem := queue_problem("queue_name", task.queue_name):
            raise compat.InvalidTask(problem)
        if task.run_after is not None and task.run_after > timezone.now() + MAX_DELAY:
            raise compat.InvalidTask(f"run_after must be at most {MAX_DELAY.days} days ahead")
        if isinstance(task, LeaseJobsTask) and task.schedule is not None:
            # As the task is defined (its __post_init__ calls this): its job, under
            # these OPTIONS as the task overrides them. A copy, or an enqueue, finds it.
            scheduled.define(task, self.task_options.for_task(task))

    def enqueue(self, task: compat.AnyTask, args: Any, kwargs: Any) -> compat.AnyTaskResult:
        """Enqueue *task* as one new run, in the caller's transaction (SPEC §9).

        Every check comes before the one ``INSERT``, which has no key to
        conflict on: a refused call writes nothing and leaves the caller's
        transaction as it was.

        Raises
        ------
        InvalidTask
            The task is not one this backend can run (the framework's checks,
            a queue outside ``QUEUES``).
        NotQueueSafe
            An argument JSON would not return unchanged; also a ``TypeError``.
            It names the value: ``args.0``, ``kwargs.name.3``.
        ImproperlyConfigured
            ``django_leasejobs`` is not in ``INSTALLED_APPS``, or this backend's
            ``OPTIONS`` are invalid (``manage.py check`` says how).
        """
        self._require_app()
        # The models, here and not at the top: see the module docstring.
        from django_leasejobs.store.starts import Route, Row, insert

        from .results import task_result

        self.validate_task(task)
        if self.task_options.problems:
            raise ImproperlyConfigured(
                f"{self._where()}['OPTIONS']: {self.task_options.problems[0]}"
            )
        envelope = Envelope.of(task, args, kwargs, self.alias)
        row = Row(new_id(), envelope.instance, encode(envelope.payload(), "payload"), None)
        route = Route(task.queue_name, task.priority)
        (run,) = insert(TASK_JOB, RunOrigin.TASK, [row], route, run_after=task.run_after)
        result = task_result(run, [], envelope=envelope, task=task, in_flight=False)
        # At once, inside the caller's transaction, as Django's own backends send it.
        signals.send_now(compat.task_enqueued, type(self), task_result=result)
        return result

    # -- results -------------------------------------------------------------------------

    def get_result(self, result_id: str) -> compat.AnyTaskResult:
        """The task run *result_id* as it stands, from any thread or process.

        Raises ``TaskResultDoesNotExist`` for an unknown or malformed id, the
        id of a run that is not a task's, or a task whose path no longer imports;
        ``ImproperlyConfigured`` when ``django_leasejobs`` is not installed.
        """
        self._require_app()
        from django_leasejobs.models import Run  # not at the top: see the module docstring

        from .results import read_result

        if not isinstance(result_id, str) or not RUN_ID.fullmatch(result_id):
            raise compat.TaskResultDoesNotExist(result_id)
        try:
            return read_result(result_id)
        except Run.DoesNotExist:
            raise compat.TaskResultDoesNotExist(result_id) from None
        except (ValueError, TaskGone) as exc:
            raise compat.TaskResultDoesNotExist(f"{result_id}: {exc}") from None

    # -- checks --------------------------------------------------------------------------

    def check(self, **kwargs: Any) -> Iterable[checks.CheckMessage]:
        """Misconfiguration, with ``leasejobs.E1xx`` ids (``manage.py check``)."""
        where = self._where()
        if not compat.AVAILABLE:
            yield checks.Error(f"{where}: {compat.MISSING}.", id="leasejobs.E101")
        if not apps.is_installed("django_leasejobs"):
            yield checks.Error(
                NOT_INSTALLED.format(where=where), hint=NOT_INSTALLED_HINT, id="leasejobs.E100"
            )
        for problem in self.task_options.problems:
            yield checks.Error(f"{where}['OPTIONS']: {problem}.", id="leasejobs.E102")
        for module in self.task_options.scheduled_tasks:
            if (refused := scheduled.import_problem(module)) is not None:
                yield checks.Error(
                    f"{where}['OPTIONS']['SCHEDULED_TASKS']: module {module!r} does not "
                    f"import ({refused}), so its scheduled tasks are not defined.",
                    hint="List importable dotted module paths, as INSTALLED_APPS does.",
                    id="leasejobs.E104",
                )
        if self.queues_problem is not None:
            given = self.queues_given
            hint = f"For one queue, write QUEUES = [{given!r}]." if isinstance(given, str) else None
            yield checks.Error(f"{where}: {self.queues_problem}.", hint=hint, id="leasejobs.E103")
        for queue in sorted(self.queues, key=str):
            if refused := queue_problem("QUEUES", queue):
                yield checks.Error(f"{where}: {refused}.", id="leasejobs.E103")
