"""Which workers take a run, and in what order: its queue (W4) and priority (D7).

Pure data and checks, importable before the app registry is ready:
``@job`` validates its defaults at import and ``start()`` its overrides
before anything is written (§11), in the same words.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_QUEUE",
    "PRIORITY_MAX",
    "PRIORITY_MIN",
    "QUEUE_LENGTH",
    "priority_problem",
    "queue_problem",
]

DEFAULT_QUEUE = "default"
QUEUE_LENGTH = 100
PRIORITY_MIN = -100
PRIORITY_MAX = 100


def queue_problem(name: str, value: object) -> str | None:
    """What is wrong with *value* as a queue called *name*, or ``None``."""
    if not isinstance(value, str) or not 0 < len(value) <= QUEUE_LENGTH:
        return f"{name} must be a non-empty str of at most {QUEUE_LENGTH} characters, got {value!r}"
    if "\x00" in value or not _encodes(value):
        return f"{name} holds a NUL or a lone surrogate, which a database cannot store"
    return None


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True


def priority_problem(name: str, value: object) -> str | None:
    """What is wrong with *value* as a priority called *name*, or ``None``.

    A ``bool`` is an ``int`` to Python but never a priority: ``priority=True``
    is a mistake, not 1.
    """
    if type(value) is not int or not PRIORITY_MIN <= value <= PRIORITY_MAX:
        return (
            f"{name} must be an int from {PRIORITY_MIN} to {PRIORITY_MAX} "
            f"(higher runs first), got {value!r}"
        )
    return None
