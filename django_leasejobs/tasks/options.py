"""The backend's ``OPTIONS`` and a task's own options (SPEC §9).

``OPTIONS`` are read once, when Django builds the backend, and never raise
there: a bad value is kept as a problem, which ``manage.py check`` reports
(``leasejobs.E102``) and ``enqueue()`` refuses with. On Django 6.1 and the
backport, ``@task(retry=..., timeout=..., safe_to_repeat=...)`` overrides
them for one task, through :class:`LeaseJobsTask` -- as do the names of
Django's open proposals, ``max_attempts=`` and ``backoff=`` (revision 4,
:mod:`.backoff`) -- and ``@task(schedule=...)`` makes a task a scheduled
one (:mod:`.scheduled`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from django_leasejobs import compat
from django_leasejobs.job_checks import MIN_LEASE
from django_leasejobs.known import TASK_JOB
from django_leasejobs.policy import MAX_DELAY, Retry

from .backoff import BackedOff, Backoff

__all__ = [
    "BACKEND_PATH",
    "DEFAULT_RETRY",
    "TASK_JOB",
    "LeaseJobsTask",
    "TaskOptions",
    "duration_of",
    "retry_of",
]

#: Where ``TASKS`` names this backend.
BACKEND_PATH = "django_leasejobs.tasks.LeaseJobsBackend"

#: One attempt, as Django's own backends: a task that raises has failed.
DEFAULT_RETRY = Retry(max_attempts=1)

KNOWN = ("RETRY", "LEASE", "TIMEOUT", "SAFE_TO_REPEAT", "SCHEDULED_TASKS")


def modules_of(value: object, name: str) -> tuple[tuple[str, ...], str | None]:
    """*value* as dotted module paths -- a list or tuple of them -- or the problem."""
    if isinstance(value, list | tuple) and all(
        isinstance(item, str) and item.strip() for item in value
    ):
        return tuple(value), None
    return (), f"{name} must be a list of dotted module paths, got {value!r}"


def retry_of(value: object, name: str) -> tuple[Retry | None, str | None]:
    """*value* as a :class:`Retry` -- given as one, or as its keyword dict -- or the problem."""
    if isinstance(value, dict):
        try:
            value = Retry(**value)
        except TypeError as exc:
            return None, f"{name} is not a Retry's keywords ({exc})"
    if not isinstance(value, Retry):
        return None, f"{name} must be a django_leasejobs.Retry or a dict of its keywords"
    if problem := value.problem():
        return None, f"{name}: {problem}"
    return value, None


def duration_of(
    value: object, name: str, *, least: timedelta | None = None
) -> tuple[timedelta | None, str | None]:
    """*value* -- a timedelta, or a number of seconds -- as a timedelta, or the problem.

    The one reading of a duration for ``OPTIONS["LEASE"]``, ``OPTIONS["TIMEOUT"]``
    and ``@task(timeout=...)``, so each takes the same forms: settings files
    and JSON often hold numbers. *least* is the shortest accepted; without
    it, anything longer than zero. At most :data:`~django_leasejobs.policy.MAX_DELAY`.
    """
    found: object = value
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            found = timedelta(seconds=value)
        except (OverflowError, ValueError):  # inf, NaN, or past what a timedelta holds
            found = None
    if isinstance(found, timedelta) and found <= MAX_DELAY:
        long_enough = found > timedelta(0) if least is None else found >= least
        if long_enough:
            return found, None
    most = f"{MAX_DELAY.days} days"
    if least is None:
        bounds = f"more than zero and at most {most}"
    else:
        bounds = f"from {least / timedelta(milliseconds=1):g} ms to {most}"
    return None, f"{name} must be a timedelta or a number of seconds, {bounds}, got {value!r}"


@dataclass(frozen=True)
class TaskOptions:
    """What ``OPTIONS`` set, once checked; ``problems`` lists what was refused."""

    retry: Retry = DEFAULT_RETRY
    lease: timedelta | None = None
    timeout: timedelta | None = None
    safe_to_repeat: bool = True
    scheduled_tasks: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()

    @classmethod
    def read(cls, options: object) -> TaskOptions:
        if not isinstance(options, dict):
            return cls(problems=(f"OPTIONS must be a dict, got {type(options).__name__}",))
        problems = [
            f"unknown option {key!r}; the options are {', '.join(KNOWN)}"
            for key in options
            if key not in KNOWN
        ]
        values: dict[str, Any] = {}
        if "RETRY" in options:
            retry, problem = retry_of(options["RETRY"], "RETRY")
            values["retry"] = retry or DEFAULT_RETRY
            problems += [problem] if problem else []
        for key, field, least in (("LEASE", "lease", MIN_LEASE), ("TIMEOUT", "timeout", None)):
            if options.get(key) is None:
                continue
            duration, problem = duration_of(options[key], key, least=least)
            if problem:
                problems.append(problem)
            else:
                values[field] = duration
        if "SAFE_TO_REPEAT" in options:
            if type(options["SAFE_TO_REPEAT"]) is not bool:
                problems.append(
                    f"SAFE_TO_REPEAT must be True or False, got {options['SAFE_TO_REPEAT']!r}"
                )
            else:
                values["safe_to_repeat"] = options["SAFE_TO_REPEAT"]
        if "SCHEDULED_TASKS" in options:
            modules, problem = modules_of(options["SCHEDULED_TASKS"], "SCHEDULED_TASKS")
            values["scheduled_tasks"] = modules
            problems += [problem] if problem else []
        return cls(problems=tuple(problems), **values)

    def for_task(self, task: object) -> TaskOptions:
        """These options as *task* runs under them: a :class:`LeaseJobsTask`'s own win.

        ``max_attempts=N`` is the backend's ``RETRY`` with N attempts; a
        ``backoff`` makes the policy one pass's own (:class:`~.backoff.BackedOff`):
        build these once per pass.
        """
        if not isinstance(task, LeaseJobsTask):
            return self
        retry = task.retry if isinstance(task.retry, Retry) else self.retry
        if task.max_attempts is not None:
            retry = replace(retry, max_attempts=task.max_attempts)
        if task.backoff is not None:
            retry = BackedOff.of(retry, task.backoff)
        return replace(
            self,
            retry=retry,
            timeout=task.timeout if isinstance(task.timeout, timedelta) else self.timeout,
            safe_to_repeat=(
                task.safe_to_repeat if task.safe_to_repeat is not None else self.safe_to_repeat
            ),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseJobsTask(compat.Task):  # type: ignore[type-arg]  # generic in the backport only
    """A task with this backend's per-task options (Django 6.1 and the backport).

    ``@task(retry=Retry(max_attempts=3), timeout=timedelta(minutes=5),
    safe_to_repeat=False)`` sets them for one task; ``None`` keeps the
    backend's ``OPTIONS``. Each takes the forms its option does: ``retry``
    a ``Retry`` or its keyword dict, ``timeout`` a timedelta or a number of
    seconds (:func:`duration_of`). Checked when the task is defined, at
    import, and kept as a ``Retry`` and a timedelta.

    Revision 4, the names of Django's open proposals (new-features #142,
    #144): ``max_attempts=N`` (the backend's ``RETRY`` with N attempts) and
    ``backoff=fn`` (``fn(exception, task_result)``: the next attempt's delay
    in seconds or a timedelta, or ``None`` to give up; :mod:`.backoff`),
    refused together with ``retry=``. And ``schedule=`` (with ``timezone=``,
    ``missed=``): a scheduled task, registered as its module is imported, when
    the backend accepts it (:mod:`.scheduled`).
    """

    retry: Retry | dict[str, Any] | None = None
    timeout: timedelta | float | None = None
    safe_to_repeat: bool | None = None
    max_attempts: int | None = None
    backoff: Backoff | None = None
    schedule: str | None = None
    timezone: str | None = None
    missed: str | None = None

    def __post_init__(self) -> None:
        self._check_standard_names()
        if self.retry is not None:
            retry, problem = retry_of(self.retry, "retry")
            if problem:
                raise compat.InvalidTask(f"task {self.module_path}: {problem}")
            object.__setattr__(self, "retry", retry)
        if self.timeout is not None:
            timeout, problem = duration_of(self.timeout, "timeout")
            if problem:
                raise compat.InvalidTask(f"task {self.module_path}: {problem}")
            object.__setattr__(self, "timeout", timeout)
        if self.safe_to_repeat is not None and type(self.safe_to_repeat) is not bool:
            raise compat.InvalidTask(
                f"task {self.module_path}: safe_to_repeat must be True or False, "
                f"got {self.safe_to_repeat!r}"
            )
        if self.schedule is None and (self.timezone is not None or self.missed is not None):
            raise compat.InvalidTask(
                f"task {self.module_path}: timezone= and missed= need a schedule="
            )
        # By name: a slots dataclass is a new class, which zero-argument super() misses.
        # The backend's validate_task(), called there, defines a scheduled task's job.
        compat.Task.__post_init__(self)

    def _check_standard_names(self) -> None:
        """``max_attempts`` and ``backoff`` as the proposals have them, and never with ``retry``."""
        given = [name for name in ("max_attempts", "backoff") if getattr(self, name) is not None]
        if self.retry is not None and given:
            both = " and ".join(f"{name}=" for name in ("retry", *given))
            raise compat.InvalidTask(
                f"task {self.module_path}: {both} both set how it retries; give one or the other"
            )
        attempts = self.max_attempts
        if attempts is not None and (type(attempts) is not int or attempts < 1):
            raise compat.InvalidTask(
                f"task {self.module_path}: max_attempts must be an int >= 1, got {attempts!r}"
            )
        if self.backoff is not None and not callable(self.backoff):
            raise compat.InvalidTask(
                f"task {self.module_path}: backoff must be a callable "
                f"fn(exception, task_result) -> seconds | timedelta | None, got {self.backoff!r}"
            )
