"""The JSON text codec for the values a run carries.

Payload, cursor and counters are stored as JSON *text* that this module encodes
and decodes itself (SPEC §2), for two reasons that pull in opposite directions:

* **Strict on the way in** (R2). A payload or cursor must come back exactly as
  it went in. ``json.dumps`` quietly turns a tuple into a list, a ``Decimal``
  into an error, ``NaN`` into something no other parser reads and a
  ``datetime`` into nothing at all, so values are walked first and anything
  that would be reshaped is refused with the path where it sits.
* **Tolerant on the way out.** A hand-edited dump or a bad migration can leave
  text that does not parse. The admin must still show such a row, and the drive
  must contain it as one failed run (R9), so :func:`decode` never raises: it
  returns the value or the reason it could not.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder

from .exceptions import NotQueueSafe

__all__ = ["Decoded", "decode", "encode", "encode_result"]

#: The exact types a queue-safe value may have. Subclasses are refused too:
#: an ``IntEnum`` or a ``str`` subclass would come back as its plain base type.
_SCALARS = (str, int, float, bool)


def _describe(value: object) -> str:
    """Name what was found, for the refusal message."""
    kind = type(value)
    if kind is float:
        return f"the float {value!r}, which JSON cannot hold"
    article = "an" if kind.__name__[:1].lower() in "aeiou" else "a"
    return f"{article} {kind.__module__}.{kind.__qualname__}".replace(" builtins.", " ")


def check_queue_safe(value: object, root: str) -> None:
    """Raise :class:`NotQueueSafe` unless *value* survives JSON unchanged.

    Walks the value by hand rather than trusting ``json.dumps`` (see the module
    docstring) and reports the first offending position as a dotted path
    rooted at *root*.
    """
    on_path: set[int] = set()

    def walk(item: object, path: str) -> None:
        kind = type(item)
        if item is None or kind in _SCALARS:
            if kind is float and not math.isfinite(item):  # type: ignore[arg-type]
                raise NotQueueSafe(path, _describe(item))
            return
        if kind is not dict and kind is not list:
            raise NotQueueSafe(path, _describe(item))
        if id(item) in on_path:
            raise NotQueueSafe(path, "a cycle back to a value that contains it")
        on_path.add(id(item))
        if isinstance(item, list):
            for index, element in enumerate(item):
                walk(element, f"{path}.{index}")
        elif isinstance(item, dict):
            for key, element in item.items():
                if type(key) is not str:
                    raise NotQueueSafe(f"{path}.{key!r}", f"a key of type {type(key).__name__}")
                walk(element, f"{path}.{key}")
        on_path.discard(id(item))

    walk(value, root)


def encode(value: object, root: str) -> str:
    """Return *value* as compact JSON text, or raise :class:`NotQueueSafe`.

    *root* names the value in the error (``"payload"``, ``"cursor"``).
    """
    check_queue_safe(value, root)
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def encode_result(value: object) -> str:
    """Return a step's result as JSON text (SPEC R5).

    Step results are not held to R2: they go through Django's
    ``DjangoJSONEncoder``, so a ``datetime``, ``Decimal`` or ``UUID`` is stored
    as a string, and the handler gets that stored form back on the first call
    as on a replay. Raises ``TypeError``/``ValueError`` naming what could not be
    encoded.
    """
    return json.dumps(
        value, cls=DjangoJSONEncoder, ensure_ascii=False, allow_nan=False, separators=(",", ":")
    )


@dataclass(frozen=True, slots=True)
class Decoded:
    """A decoded column: the value, or why it could not be read.

    ``error`` is ``None`` when ``value`` is real. When it is set, ``value`` is
    the fallback and must not be read as data ("no cursor" and "a cursor we
    could not parse" are different facts).
    """

    value: Any
    error: str | None = None
    raw: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def _refuse_constant(name: str) -> Any:
    """Refuse ``NaN``/``Infinity``: Python's parser accepts them, JSON does not."""
    raise ValueError(f"{name} is not JSON")


def decode(text: str | None, *, empty: Any = None) -> Decoded:
    """Decode a stored JSON column without raising.

    ``None`` (SQL NULL) decodes to *empty*; text that does not parse comes back
    with ``error`` set to the parser's reason and ``raw`` holding the text.
    """
    if text is None:
        return Decoded(empty)
    try:
        return Decoded(json.loads(text, parse_constant=_refuse_constant), raw=text)
    except (ValueError, TypeError) as exc:
        return Decoded(empty, error=f"{type(exc).__name__}: {exc}", raw=text)
