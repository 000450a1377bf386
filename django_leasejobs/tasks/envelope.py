"""What a task run stores, and the task it stands for (SPEC §9).

A task run's payload is the call: ``{"task": path, "args": [...], "kwargs":
{...}, "backend": alias, "run_after": iso-or-null}``. The task's priority and
queue are the run's own columns, and its path is also the run's
``instance``, so the admin lists, searches and filters runs by task along an
index. The :class:`~django.tasks.Task` itself is imported again from its
path wherever the run is read, so a result's ``task`` equals the task that
was enqueued.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.utils.module_loading import import_string

from django_leasejobs import compat
from django_leasejobs.codec import check_queue_safe
from django_leasejobs.exceptions import TaskGone

if TYPE_CHECKING:
    from django_leasejobs.models import Run

#: ``TaskGone`` too: attempts recorded before it moved to :mod:`~django_leasejobs.exceptions`
#: name it by this module's path, and their ``TaskError.exception_class`` imports it from here.
__all__ = ["Envelope", "TaskGone"]


@dataclass(frozen=True)
class Envelope:
    """One enqueued call of a task, as its run's payload holds it."""

    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    backend: str
    run_after: datetime | None = None

    @classmethod
    def of(cls, task: compat.AnyTask, args: Any, kwargs: Any, backend: str) -> Envelope:
        """The call *task(\\*args, \\*\\*kwargs)*, once its arguments are known to be JSON (R2).

        Raises :class:`~django_leasejobs.NotQueueSafe` (a ``TypeError``)
        naming the first refused value, ``args.0`` or ``kwargs.name.3``.
        """
        values = list(args)  # a tuple of positional arguments is a list
        named = dict(kwargs)
        check_queue_safe(values, "args")
        check_queue_safe(named, "kwargs")
        return cls(task.module_path, values, named, backend, task.run_after)

    @property
    def instance(self) -> str:
        """The run's ``instance``: the task path, as much of it as the column holds."""
        from django_leasejobs.models import INSTANCE_LENGTH  # no models at import time

        return self.task[:INSTANCE_LENGTH]

    def payload(self) -> dict[str, Any]:
        after = None if self.run_after is None else self.run_after.isoformat()
        return {
            "task": self.task,
            "args": self.args,
            "kwargs": self.kwargs,
            "backend": self.backend,
            "run_after": after,
        }

    @classmethod
    def read(cls, payload: object) -> Envelope:
        """The envelope a task run's payload holds; ``ValueError`` if it holds none."""
        if not isinstance(payload, dict):
            raise ValueError("the run's payload is not a task call")
        task, args, kwargs = payload.get("task"), payload.get("args"), payload.get("kwargs")
        backend, after = payload.get("backend"), payload.get("run_after")
        if not (
            isinstance(task, str)
            and isinstance(args, list)
            and isinstance(kwargs, dict)
            and isinstance(backend, str)
            and (after is None or isinstance(after, str))
        ):
            raise ValueError("the run's payload is not a task call")
        return cls(task, args, kwargs, backend, None if after is None else _aware(after))

    def bound(self, run: Run) -> compat.AnyTask:
        """The enqueued task: imported from its path, with the run's priority and queue.

        Raises :class:`~django_leasejobs.exceptions.TaskGone` when the path no longer
        imports or names no task.
        """
        try:
            found = import_string(self.task)
        except ImportError as exc:
            # From exc: the attempt's traceback shows why (a module gone, or its own import).
            raise TaskGone(f"task {self.task!r} does not import ({exc})") from exc
        if not isinstance(found, compat.Task):
            raise TaskGone(f"{self.task!r} is not a task (it is a {type(found).__name__})")
        changes = {
            "priority": run.priority,
            "queue_name": run.queue,
            "backend": self.backend,
            "run_after": self.run_after,
        }
        # Not dataclasses.replace(): that validates the task against today's
        # settings, and a run enqueued under yesterday's must still read back.
        bound = object.__new__(type(found))
        for field in dataclasses.fields(found):
            object.__setattr__(
                bound, field.name, changes.get(field.name, getattr(found, field.name))
            )
        return bound


def _aware(text: str) -> datetime:
    value = datetime.fromisoformat(text)
    if value.tzinfo is None:
        raise ValueError("the run's payload holds a naive run_after")
    return value
