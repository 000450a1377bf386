"""What the package reads of a job, as a type (SPEC §3): :class:`Definition`."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from django import forms

    from .limits import Limit
    from .policy import Retry

__all__ = ["Definition"]


class Definition(Protocol):
    """A job, as the modules below the registry read it: ``registry.Job`` is the one kind.

    A protocol, not the class, so that what the registry imports -- the
    checks of a job's options, a pass's lease, the start -- never imports
    the registry back, not even for an annotation.
    """

    @property
    def name(self) -> str: ...
    @property
    def coalesce(self) -> bool: ...
    @property
    def handler(self) -> Callable[..., Any]: ...
    @property
    def lease(self) -> timedelta | None: ...
    @property
    def retry(self) -> Retry: ...
    @property
    def timeout(self) -> timedelta | None: ...
    @property
    def stall_after(self) -> timedelta | None: ...
    @property
    def safe_to_repeat(self) -> bool: ...
    @property
    def heartbeat(self) -> bool: ...
    @property
    def limit(self) -> Limit | None: ...
    @property
    def queue(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def form(self) -> type[forms.Form] | None: ...
    @property
    def missed(self) -> str: ...
    @property
    def schedule(self) -> str | None: ...
    @property
    def timezone(self) -> str | None: ...
