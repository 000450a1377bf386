"""The root of every django-leasejobs exception: a docstring that is the default message."""

from __future__ import annotations

from typing import Any

__all__ = ["LeaseJobsError"]


class LeaseJobsError(Exception):
    """A django-leasejobs error. Do not raise directly."""

    def __init__(self, message: str | None = None, *args: Any) -> None:
        default = (self.__doc__ or "").strip().split("\n", 1)[0]
        super().__init__(message or default, *args)
