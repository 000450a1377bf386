"""How long a pass on a pool thread may run before its thread is given up (SPEC F13).

A pass declares its bound (:func:`bounded`: its job's ``timeout``); each
pool thread keeps a :class:`Slot` -- what it runs and until when -- that the
:class:`~.pool.Pool` reads to find a thread hung past its bound plus
:data:`HUNG_GRACE`, abandon it and start another in its place.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["HUNG_GRACE", "Slot", "bounded", "on_this_thread"]

#: How long past its declared bound a pass may still return before its thread is given up.
HUNG_GRACE = 1.0


class Slot:
    """What one thread is running, and until when it may (under :attr:`lock`)."""

    __slots__ = ("abandoned", "deadline", "lock", "tag")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tag: Any = None
        self.deadline: float | None = None
        self.abandoned = False


#: The slot of the pool thread this is, if it is one: each thread sets its own.
on_this_thread = threading.local()


@contextmanager
def bounded(seconds: float | None) -> Iterator[None]:
    """Declare that the calling pass may run *seconds* more (``None``: unbounded) (F13).

    On a pool thread, a pass still in this block :data:`HUNG_GRACE` after
    that is abandoned and its thread replaced. Elsewhere it does nothing.
    """
    slot: Slot | None = getattr(on_this_thread, "slot", None)
    if slot is None or seconds is None:
        yield
        return
    with slot.lock:
        slot.deadline = time.monotonic() + seconds + HUNG_GRACE
    try:
        yield
    finally:
        with slot.lock:
            slot.deadline = None
