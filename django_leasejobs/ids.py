"""Run ids and lease owner tokens.

Runs are keyed by a ULID: 26 characters of Crockford base32 whose first ten
encode the creation time in milliseconds. Text sorts in time order on every
backend (no UUID column type to map, no byte order to worry about), reads well
in the admin and in URLs, and ``ORDER BY id`` is "oldest first" for free.

Ids minted by one process are strictly increasing (the monotonic ULID
variant: within one millisecond the random part counts up), so runs a process
starts in a row list in that order. Across processes, ids within one
millisecond are unordered, which nothing relies on.
"""

from __future__ import annotations

import os
import threading
import time

__all__ = ["ID_LENGTH", "ID_PATTERN", "new_id", "new_owner"]

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
#: Characters in an id (and an owner token): 128 bits at five a character, rounded up.
ID_LENGTH = 26
#: What an id looks like, as a regular expression (no anchors): the column's values, exactly.
ID_PATTERN = f"[{_ALPHABET}]{{{ID_LENGTH}}}"
_RANDOM_BITS = 80
#: Every two-digit string, by the 10-bit value it spells: half the steps of one digit at a time.
_PAIRS = [high + low for high in _ALPHABET for low in _ALPHABET]
_lock = threading.Lock()
#: The last id minted in this process, as a number: read and written under :data:`_lock`.
_last = 0


def new_id() -> str:
    """Return a new ULID string (time-ordered, 128 bits, :data:`ID_LENGTH` characters)."""
    global _last  # noqa: PLW0603 - the process-wide monotonic state is the point
    fresh = (time.time_ns() // 1_000_000) << _RANDOM_BITS | int.from_bytes(os.urandom(10), "big")
    with _lock:
        # Same millisecond (or a clock that stepped back): count up from the last.
        value = _last = fresh if fresh > _last else _last + 1
    return _text(value)


def _text(value: int) -> str:
    """The 26 Crockford base32 characters of a 128-bit *value*, two digits at a time."""
    pairs = []
    for _ in range(ID_LENGTH // 2):
        pairs.append(_PAIRS[value & 0x3FF])
        value >>= 10
    return "".join(reversed(pairs))


def new_owner() -> str:
    """Return a fresh lease owner token; minted per claim and never reused (SPEC L2)."""
    return new_id()
