"""What a job's definition must be: each ``@job`` option checked at registration (SPEC §3, §11).

So a bad lease, retry policy, cron expression or limit stops ``manage.py
check`` with the job named, rather than surfacing in a worker at 3 a.m.
Pure: no models, so ``@job`` runs at import.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from django import forms

from . import cron
from .exceptions import InvalidJob
from .limits import Limit
from .policy import MAX_DELAY, Retry, delay_problem
from .routing import priority_problem, queue_problem
from .states import MissedRule

if TYPE_CHECKING:
    from .definition import Definition

__all__ = ["MIN_LEASE", "NAME_RE", "PAGE_FIELDS", "form_problem", "validate"]

#: Job names: no whitespace, and no ``|``, which separates job from instance
#: in the coalescing key (R1).
NAME_RE = re.compile(r"[A-Za-z0-9_.:/\-]{1,100}")
MIN_LEASE = timedelta(milliseconds=100)
#: The admin's "Start a run" page's own fields (A9), posted beside a job's form's fields:
#: a form field may not take one of these names, nor one starting with ``_`` (the page's
#: buttons, as Django's admin names ``_save``), nor the CSRF token's.
PAGE_FIELDS = ("job", "instance", "payload", "again")


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


def form_problem(form: object) -> str | None:
    """Why *form* cannot be a job's ``form`` (SPEC §3, A9), or ``None`` when it can."""
    if not (isinstance(form, type) and issubclass(form, forms.Form)):
        return (
            "form must be a django.forms.Form subclass (the class, whose cleaned_data "
            f"is the run's payload), got {form!r}"
        )
    clashes = [
        name
        for name in form.base_fields
        if name in PAGE_FIELDS or name.startswith("_") or name == "csrfmiddlewaretoken"
    ]
    if clashes:
        return (
            f"form field {clashes[0]!r} takes a name the admin's start page uses itself "
            f"({', '.join(PAGE_FIELDS)}, csrfmiddlewaretoken, or one starting with '_'): "
            "rename the field"
        )
    return None


def validate(spec: Definition) -> None:
    """Refuse *spec* with :class:`InvalidJob`, naming it, if any of its options is not one (§11)."""
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
    if spec.form is not None and (problem := form_problem(spec.form)):
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
