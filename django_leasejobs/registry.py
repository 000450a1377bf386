"""The job registry and the ``@job`` decorator (SPEC §3).

Jobs are registered when each installed app's ``jobs`` module is imported
(autodiscovery, like ``admin.py``). Every option is validated here, at import,
so a bad lease or cron expression stops ``manage.py check`` with the job named
rather than surfacing in a worker at 3 a.m.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypedDict, Unpack, overload
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from . import cron
from .conf import conf
from .exceptions import DuplicateJob, InvalidJob, JobNotRegistered
from .limits import Limit
from .policy import MAX_DELAY, Retry, delay_problem
from .routing import DEFAULT_QUEUE, priority_problem, queue_problem
from .states import MissedRule

if TYPE_CHECKING:
    from .passes import Pass, PassResult
    from .store import StartResult

    #: What a job runs: it is given the pass, and returns ``p.advance()``,
    #: ``p.done()`` or ``None`` (SPEC §3).
    Handler = Callable[[Pass], PassResult | None]
else:
    Handler = Callable[..., Any]  # Pass needs the models, which registration must not import.

__all__ = ["Handler", "Job", "JobOptions", "MissedRule", "get_job", "job", "registry"]

#: Job names: no whitespace, and no ``|``, which separates job from instance
#: in the coalescing key (R1).
NAME_RE = re.compile(r"[A-Za-z0-9_.:/\-]{1,100}")
MIN_LEASE = timedelta(milliseconds=100)


@dataclass(frozen=True)
class Job:
    """A registered job: its handler and its options.

    Calling a ``Job`` calls its handler, so jobs stay testable as plain
    functions. ``Job.start(...)`` is :func:`django_leasejobs.start` for it.
    """

    name: str
    handler: Handler = field(repr=False)
    lease: timedelta | None = None
    retry: Retry = field(default_factory=Retry)
    timeout: timedelta | None = None
    schedule: str | None = None
    timezone: str | None = None
    missed: MissedRule = MissedRule.CATCH_UP_ONCE
    safe_to_repeat: bool = True
    stall_after: timedelta | None = None
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    heartbeat: bool = False
    limit: Limit | None = None
    #: Internal, for the built-in task job (SPEC §9): options that depend on
    #: the run -- its task's and its backend's -- resolved once it is claimed.
    per_run: Callable[[Any], Job] | None = field(default=None, repr=False, compare=False)
    #: Internal: ``False`` for a job whose every start is a new run (a task's
    #: enqueue, SPEC §9), which then holds no coalescing key.
    coalesce: bool = field(default=True, repr=False)

    def __post_init__(self) -> None:
        _validate(self)
        object.__setattr__(self, "missed", MissedRule(self.missed))  # "skip": MissedRule.SKIP

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.handler(*args, **kwargs)

    @property
    def effective_lease(self) -> timedelta:
        """The job's lease, or ``LEASEJOBS["LEASE"]`` when it sets none."""
        return self.lease if self.lease is not None else conf.LEASE

    @property
    def origin(self) -> str:
        return f"{self.handler.__module__}.{self.handler.__qualname__}"

    def start(
        self,
        payload: Any = None,
        *,
        instance: str = "default",
        again: bool = False,
        run_after: datetime | None = None,
        queue: str | None = None,
        priority: int | None = None,
    ) -> StartResult:
        """Start a run of this job, or join the live one (see :func:`~django_leasejobs.start`)."""
        from .store import start  # Avoids importing models before the app registry is ready.

        return start(
            self,
            payload,
            instance=instance,
            again=again,
            run_after=run_after,
            queue=queue,
            priority=priority,
        )


def _is_duration(value: object) -> bool:
    return isinstance(value, timedelta)


def _is_async(handler: Callable[..., Any]) -> bool:
    """Whether calling *handler* gives a coroutine (or an async generator), not a result (§15).

    An ``async def`` function, a ``functools.partial`` of one, or an object
    whose ``__call__`` is ``async def``: a worker calls handlers on its own
    threads (W5), synchronously, and would commit the un-awaited coroutine.
    """
    while isinstance(handler, functools.partial):
        handler = handler.func
    if inspect.iscoroutinefunction(handler) or inspect.isasyncgenfunction(handler):
        return True
    if inspect.isfunction(handler) or inspect.ismethod(handler) or inspect.isclass(handler):
        return False
    call = type(handler).__call__  # what calling the object runs
    return inspect.iscoroutinefunction(call) or inspect.isasyncgenfunction(call)


def _validate(spec: Job) -> None:
    name = spec.name
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise InvalidJob(
            str(name),
            "a job name is 1-100 characters of letters, digits and _ . : / - (no spaces, no '|')",
        )
    if not callable(spec.handler):
        raise InvalidJob(name, f"the handler must be callable, got {spec.handler!r}")
    if _is_async(spec.handler):
        raise InvalidJob(
            name,
            "the handler is an async function; a job's handler is called synchronously "
            "(wrap the coroutine with asgiref's async_to_sync)",
        )
    if spec.lease is not None and (
        not _is_duration(spec.lease) or not MIN_LEASE <= spec.lease <= MAX_DELAY
    ):
        raise InvalidJob(
            name,
            f"lease must be a timedelta of at least 100 ms and at most {MAX_DELAY.days} days, "
            f"got {spec.lease!r}",
        )
    if not isinstance(spec.retry, Retry):
        raise InvalidJob(name, f"retry must be a django_leasejobs.Retry, got {spec.retry!r}")
    if problem := spec.retry.problem():
        raise InvalidJob(name, problem)
    for option in ("timeout", "stall_after"):
        value = getattr(spec, option)
        if value is not None and (problem := delay_problem(option, value, positive=True)):
            raise InvalidJob(name, problem)
    for flag in ("safe_to_repeat", "heartbeat"):
        if type(getattr(spec, flag)) is not bool:
            raise InvalidJob(name, f"{flag} must be True or False, got {getattr(spec, flag)!r}")
    if spec.limit is not None:
        if not isinstance(spec.limit, Limit):
            raise InvalidJob(name, f"limit must be a django_leasejobs.Limit, got {spec.limit!r}")
        if problem := spec.limit.problem():
            raise InvalidJob(name, problem)
    routing = (queue_problem("queue", spec.queue), priority_problem("priority", spec.priority))
    for problem in routing:
        if problem:
            raise InvalidJob(name, problem)
    if spec.missed not in MissedRule.values:
        raise InvalidJob(
            name, f"missed must be one of {', '.join(MissedRule.values)}, got {spec.missed!r}"
        )
    if spec.schedule is None:
        if spec.timezone is not None:
            raise InvalidJob(name, "timezone is only meaningful with a schedule")
        return
    if not isinstance(spec.schedule, str) or not croniter.is_valid(spec.schedule):
        raise InvalidJob(
            name, f"schedule {spec.schedule!r} is not a valid cron expression (croniter syntax)"
        )
    try:
        zone = ZoneInfo(spec.timezone or "UTC")  # the site's TIME_ZONE is Django's to check
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise InvalidJob(name, f"unknown timezone {spec.timezone!r}") from None
    try:
        cron.next_due(spec.schedule, zone, datetime.now(UTC))
    except ValueError:  # croniter's CroniterBadDateError: no date within its search
        raise InvalidJob(
            name, f"schedule {spec.schedule!r} never comes round (no date matches it)"
        ) from None


class JobRegistry:
    """Jobs by name. One per process: :data:`registry`."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}

    def register(self, spec: Job) -> Job:
        """Add *spec*; raise :class:`DuplicateJob` if another handler has its name.

        Registering the same function again (a module imported twice) replaces
        the entry rather than failing.
        """
        existing = self._jobs.get(spec.name)
        if existing is not None and existing.origin != spec.origin:
            raise DuplicateJob(
                spec.name, f"registered twice, by {existing.origin} and by {spec.origin}"
            )
        self._jobs[spec.name] = spec
        return spec

    def unregister(self, name: str) -> None:
        self._jobs.pop(name, None)

    def get(self, name: str) -> Job:
        """Return the job named *name*, or raise :class:`JobNotRegistered`."""
        try:
            return self._jobs[name]
        except KeyError:
            raise JobNotRegistered(name, list(self._jobs)) from None

    def __contains__(self, name: object) -> bool:
        return name in self._jobs

    def __iter__(self) -> Iterator[Job]:
        return iter(list(self._jobs.values()))

    def __len__(self) -> int:
        return len(self._jobs)

    def names(self) -> list[str]:
        return sorted(self._jobs)


registry = JobRegistry()


def get_job(name: str | Job) -> Job:
    """Return the registered job for *name* (a name or a :class:`Job`)."""
    return registry.get(name.name if isinstance(name, Job) else name)


class JobOptions(TypedDict, total=False):
    """The options of :func:`job` (SPEC §3), each documented there."""

    lease: timedelta | None
    retry: Retry | None
    timeout: timedelta | None
    schedule: str | None
    timezone: str | None
    missed: MissedRule | str | None
    safe_to_repeat: bool
    stall_after: timedelta | None
    queue: str
    priority: int
    heartbeat: bool
    limit: Limit | None


@overload
def job(name: Handler, /) -> Job: ...


@overload
def job(name: str | None = None, /, **options: Unpack[JobOptions]) -> Callable[[Handler], Job]: ...


def job(
    name: str | Handler | None = None, /, **options: Unpack[JobOptions]
) -> Job | Callable[[Handler], Job]:
    """Register a function as a job.

    Use it bare (``@job``: the job is named after the function) or with a name
    and options (``@job("import_contacts", lease=timedelta(minutes=5))``).

    Parameters
    ----------
    name:
        The job's name, unique in the site; stored on every run.
    lease:
        How long a claim holds a run between step boundaries (L2, L7); at least
        100 ms. Defaults to ``LEASEJOBS["LEASE"]``.
    retry:
        The :class:`Retry` policy for failed passes (R4). Defaults to ``Retry()``.
    timeout:
        The longest one pass may take (R10); ``None`` for no limit.
    schedule, timezone, missed:
        A cron expression (croniter syntax), its time zone (default
        ``settings.TIME_ZONE``) and the missed-run rule (S3), a ``MissedRule``
        or its value: ``"skip"``, ``"catch_up_once"`` (the default) or ``"required"``.
    safe_to_repeat:
        ``False`` for a job whose interrupted pass must not be replayed without
        an operator (L3).
    stall_after:
        How long a run may stay live before its schedule reads as stalled (S6).
    queue:
        Which workers take the job's runs (W4): those started with
        ``rundueJobs --queue NAME`` for this name, or without ``--queue``.
        1-100 characters; defaults to ``"default"``. ``start()`` may override it.
    priority:
        An int from -100 to 100: among due runs a higher one is driven first
        (D7). Defaults to 0. ``start()`` may override it.
    heartbeat:
        ``True`` for a handler with long stretches and no step boundaries: a
        side thread renews the lease about every third of it while the pass
        runs (L10), so no other worker takes the run over meanwhile. Past the
        job's ``timeout`` the renewals stop and the run is taken over.
    limit:
        A :class:`Limit`: how many passes of the job may run at once and how
        fast they may begin, per key if it gives one, across every worker
        (SPEC §14). A pass over its limit runs nothing: it is ``throttled``
        and due again when the limit allows it.

    Raises
    ------
    InvalidJob
        When an option is invalid, naming the job.
    DuplicateJob
        When another function is already registered under the name.
    """
    if name is not None and not isinstance(name, str) and not callable(name):
        raise InvalidJob(str(name), f"a job name must be a str, got {type(name).__name__}")
    if unknown := sorted(set(options) - set(JobOptions.__annotations__)):
        known = ", ".join(JobOptions.__annotations__)
        raise InvalidJob(str(name), f"unknown option {unknown[0]!r}; the options are {known}")
    if options.get("missed") is not None and options.get("schedule") is None:
        raise InvalidJob(str(name), "missed is only meaningful with a schedule")
    values: dict[str, Any] = {key: value for key, value in options.items() if value is not None}

    def register(handler: Handler) -> Job:
        named = name if isinstance(name, str) else getattr(handler, "__name__", repr(handler))
        return registry.register(Job(name=named, handler=handler, **values))

    if callable(name):
        handler, name = name, None
        return register(handler)
    return register
