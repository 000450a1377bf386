"""The one module that imports Django's task framework (SPEC §9).

Django 6.0 ships it as ``django.tasks``; on Django 5.2 it is the
``django-tasks`` backport, ``django_tasks`` (``pip install
django-leasejobs[tasks]``). Every other module takes the framework's names
from here, so a site on Django 5.2 without the backport can still import
``django_leasejobs.tasks``: :data:`AVAILABLE` is then ``False``, and
``manage.py check`` says what to install (``leasejobs.E101``) instead of the
site failing at import.

The backport renamed two exceptions on its way into Django
(``InvalidTaskError`` became ``InvalidTask``); both spellings are accepted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import django

__all__ = [
    "AVAILABLE",
    "DEFAULT_TASK_QUEUE_NAME",
    "FRAMEWORK",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "normalize_json",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]

#: Which framework the site has: ``"django.tasks"``, ``"django_tasks"`` or ``""``.
FRAMEWORK: str

if TYPE_CHECKING:
    # One spelling for the type checker; at run time either may be the one.
    from django_tasks import (
        DEFAULT_TASK_QUEUE_NAME,
        TaskContext,
        TaskResult,
        task,
        task_backends,
    )
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError, TaskResultStatus
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json

    AVAILABLE: bool
    #: Any task, any result: the backport's are generic, Django's are not.
    AnyTask = Task[Any, Any]
    AnyTaskResult = TaskResult[Any]
elif django.VERSION >= (6, 0):
    from django.tasks import (
        DEFAULT_TASK_QUEUE_NAME,
        TaskContext,
        TaskResult,
        task,
        task_backends,
    )
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskError, TaskResultStatus
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    AVAILABLE, FRAMEWORK = True, "django.tasks"
else:
    try:
        from django_tasks import (
            DEFAULT_TASK_QUEUE_NAME,
            TaskContext,
            TaskResult,
            task,
            task_backends,
        )
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskError, TaskResultStatus
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started
        from django_tasks.utils import normalize_json

        try:
            from django_tasks.exceptions import InvalidTask
        except ImportError:  # the backport's own name, before the rename
            from django_tasks.exceptions import InvalidTaskError as InvalidTask
        AVAILABLE, FRAMEWORK = True, "django_tasks"
    except ImportError:
        AVAILABLE, FRAMEWORK = False, ""
        DEFAULT_TASK_QUEUE_NAME = "default"

        class BaseTaskBackend:
            """Stands in for the framework's base class, so the backend still imports
            and its check can say what is missing (``leasejobs.E101``)."""

            task_class: Any = None
            supports_defer = supports_async_task = supports_get_result = False
            supports_priority = False

            def __init__(self, alias: str, params: dict[str, Any]) -> None:
                self.alias = alias
                self.queues = set(params.get("QUEUES", [DEFAULT_TASK_QUEUE_NAME]))
                self.options = params.get("OPTIONS", {})

        class _Missing:
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                raise ImportError(MISSING)

        Task = TaskContext = TaskResult = TaskError = _Missing
        TaskResultStatus = task_backends = task = None
        task_enqueued = task_finished = task_started = None

        class InvalidTask(Exception):
            pass

        class TaskResultDoesNotExist(Exception):
            pass

        def normalize_json(obj: Any) -> Any:
            raise ImportError(MISSING)


#: What to install when the framework is missing.
MISSING = (
    "Django's task framework is not installed: on Django 5.2 install the backport "
    "(pip install 'django-leasejobs[tasks]', which brings django-tasks); "
    "Django 6.0 and later ship it as django.tasks"
)
