"""The job registry and the ``@job`` decorator (SPEC §3).

Jobs are registered when each installed app's ``jobs`` module is imported
(autodiscovery, like ``admin.py``). Every option is validated here, at import,
so a bad lease or cron expression stops ``manage.py check`` with the job named
rather than surfacing in a worker at 3 a.m.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypedDict, Unpack, overload

from .conf import conf
from .exceptions import DuplicateJob, InvalidJob, JobNotRegistered
from .job_checks import validate
from .limits import Limit
from .policy import Retry
from .routing import DEFAULT_QUEUE
from .states import MissedRule, RunOrigin

if TYPE_CHECKING:
    from django.forms import Form

    from .passes import Pass, PassResult
    from .store import StartResult

    #: What a job runs: it is given the pass, and returns ``p.advance()``,
    #: ``p.done()`` or ``None`` (SPEC §3).
    Handler = Callable[[Pass], PassResult | None]
else:
    Handler = Callable[..., Any]  # Pass needs the models, which registration must not import.

__all__ = ["Handler", "Job", "JobOptions", "MissedRule", "get_job", "job", "registry"]


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
    #: What an operator fills in to start a run from the admin (A9): a ``Form`` class
    #: whose ``cleaned_data`` is the payload. ``start()`` from code does not use it.
    form: type[Form] | None = None
    #: Internal, for the built-in task job (SPEC §9): options that depend on
    #: the run -- its task's and its backend's -- resolved once it is claimed.
    per_run: Callable[[Any], Job] | None = field(default=None, repr=False, compare=False)
    #: Internal: ``False`` for a job whose every start is a new run (a task's
    #: enqueue, SPEC §9), which then holds no coalescing key.
    coalesce: bool = field(default=True, repr=False)

    def __post_init__(self) -> None:
        validate(self)
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

    def start(self, payload: Any = None, **options: Unpack[StartOptions]) -> StartResult:
        """Start a run of this job, or join the live one (see :func:`~django_leasejobs.start`)."""
        # Not at the top: the registry is imported before the app registry is ready.
        from .store import start_as

        return start_as(RunOrigin.API, self, payload, **options)


class JobRegistry:
    """Jobs by name. One per process: :data:`registry`."""

    def __init__(self) -> None:
        # Written as modules register their jobs (imports, app ready), each check-then-set
        # under the lock; a read is one dict operation (or a copy) and needs none.
        self._lock = threading.Lock()
        self._jobs: dict[str, Job] = {}

    def register(self, spec: Job) -> Job:
        """Add *spec*; raise :class:`DuplicateJob` if another handler has its name.

        Registering the same function again (a module imported twice) replaces
        the entry rather than failing.
        """
        with self._lock:
            existing = self._jobs.get(spec.name)
            if existing is not None and existing.origin != spec.origin:
                raise DuplicateJob(
                    spec.name, f"registered twice, by {existing.origin} and by {spec.origin}"
                )
            self._jobs[spec.name] = spec
        return spec

    def unregister(self, name: str) -> None:
        with self._lock:
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

    def names(self) -> list[str]:
        return sorted(self._jobs)


registry = JobRegistry()


def get_job(name: str | Job) -> Job:
    """Return the registered job for *name* (a name or a :class:`Job`)."""
    return registry.get(name.name if isinstance(name, Job) else name)


class StartOptions(TypedDict, total=False):
    """What a start takes besides the job and its payload (:func:`~django_leasejobs.start`)."""

    instance: str
    again: bool
    run_after: datetime | None
    queue: str | None
    priority: int | None


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
    form: type[Form] | None


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
    form:
        A ``django.forms.Form`` subclass: what an operator fills in to start a
        run from the admin ("Start a run", A9); its ``cleaned_data`` is the
        run's payload, so each cleaned value must be queue-safe (R2) -- a form
        converts a date to ISO text or a model instance to its primary key in
        its ``clean_<field>()``. Its fields may not be named ``job``,
        ``instance``, ``payload`` or ``again`` (the page's own), nor start
        with ``_``. ``start()`` from code does not use it. Without a form,
        the page asks for the payload as JSON.

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
