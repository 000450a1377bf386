"""The JSON text codec for the values a run carries.

Payload, cursor and counters are stored as JSON *text* that this module encodes
and decodes itself (SPEC §2), for two reasons that pull in opposite directions:

* **Strict on the way in** (R2). A payload or cursor must come back exactly as
  it went in. ``json.dumps`` quietly turns a tuple into a list, a ``Decimal``
  into an error, ``NaN`` into something no other parser reads and a
  ``datetime`` into nothing at all, so values are walked first and anything
  that would be reshaped is refused with the path where it sits.
* **Storable.** What passes must also be something every backend can store
  and read back: JSON text that is valid UTF-8 (a lone surrogate -- from an
  undecodable file name, say -- is written as a ``\\u`` escape), no deeper
  than :data:`MAX_DEPTH`, no larger than ``LEASEJOBS["VALUE_MAX_BYTES"]``
  (MariaDB drops the connection on a statement past ``max_allowed_packet``),
  and no int Python itself refuses to print (4 300 digits). Each refusal
  names the path, before anything is written (SPEC §12).
* **Tolerant on the way out.** A hand-edited dump or a bad migration can leave
  text that does not parse. The admin must still show such a row, and the drive
  must contain it as one failed run (R9), so :func:`decode` never raises: it
  returns the value or the reason it could not.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder

from .conf import conf
from .exceptions import NotQueueSafe

__all__ = ["MAX_DEPTH", "Decoded", "decode", "encode", "encode_result", "storable_text"]

#: How deeply lists and dicts may nest in a stored value. Python's own JSON
#: encoder and decoder give up near 1 000 levels (``RecursionError``); no real
#: payload comes close to this.
MAX_DEPTH = 100
#: Ints this long (in bits) may be past ``sys.get_int_max_str_digits()``.
_LONG_INT_BITS = 3 * 4300

#: The exact types a queue-safe value may have. Subclasses are refused too:
#: an ``IntEnum`` or a ``str`` subclass would come back as its plain base type.
_SCALARS = (str, int, float, bool)


def _describe(value: object) -> str:
    """Name what was found, for the refusal message."""
    kind = type(value)
    if kind is float:
        return f"the float {value!r}, which JSON cannot hold"
    name = f"{kind.__module__}.{kind.__qualname__}".removeprefix("builtins.")
    article = "an" if name[:1].lower() in "aeiou" else "a"  # of what is shown: "a django...User"
    return f"{article} {name}"


def check_queue_safe(value: object, root: str) -> None:
    """Raise :class:`NotQueueSafe` unless *value* survives JSON unchanged.

    Walks the value by hand rather than trusting ``json.dumps`` (see the module
    docstring) and reports the first offending position as a dotted path
    rooted at *root*.
    """
    on_path: set[int] = set()

    def walk(item: object, path: str, depth: int) -> None:
        kind = type(item)
        if item is None or kind in _SCALARS:
            if kind is float and not math.isfinite(item):  # type: ignore[arg-type]
                raise NotQueueSafe(path, _describe(item))
            if kind is int and _unprintable(item):  # type: ignore[arg-type]
                limit = sys.get_int_max_str_digits()
                raise NotQueueSafe(path, f"an int of more than {limit} digits")
            return
        if kind is not dict and kind is not list:
            raise NotQueueSafe(path, _describe(item))
        if id(item) in on_path:
            raise NotQueueSafe(path, "a cycle back to a value that contains it")
        if depth >= MAX_DEPTH:
            raise NotQueueSafe(path, f"nested more than {MAX_DEPTH} levels deep")
        on_path.add(id(item))
        if isinstance(item, list):
            for index, element in enumerate(item):
                walk(element, f"{path}.{index}", depth + 1)
        elif isinstance(item, dict):
            for key, element in item.items():
                if type(key) is not str:
                    raise NotQueueSafe(f"{path}.{key!r}", f"a key of type {type(key).__name__}")
                walk(element, f"{path}.{key}", depth + 1)
        on_path.discard(id(item))

    walk(value, root, 0)


def _unprintable(number: int) -> bool:
    """Whether Python refuses to print *number* (``sys.get_int_max_str_digits``)."""
    if number.bit_length() <= _LONG_INT_BITS:
        return False
    try:
        str(number)
    except ValueError:
        return True
    return False


def _dumps(value: object, **options: Any) -> str:
    """Compact JSON text a database can store as UTF-8.

    A lone surrogate cannot be encoded as UTF-8, so a text holding one is
    dumped again with ``\\u`` escapes, which carry it losslessly.
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), **options)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = json.dumps(value, ensure_ascii=True, separators=(",", ":"), **options)
    return text


def _bounded(text: str, root: str) -> str:
    size = len(text) if text.isascii() else len(text.encode("utf-8"))
    if size > conf.VALUE_MAX_BYTES:
        raise NotQueueSafe(
            root,
            f"{size} bytes of JSON",
            why=f"the most one stored value may take is LEASEJOBS['VALUE_MAX_BYTES'] "
            f"({conf.VALUE_MAX_BYTES} bytes)",
        )
    return text


def encode(value: object, root: str) -> str:
    """Return *value* as compact JSON text, or raise :class:`NotQueueSafe`.

    *root* names the value in the error (``"payload"``, ``"cursor"``).
    """
    check_queue_safe(value, root)
    return _bounded(_dumps(value, allow_nan=False), root)


def encode_result(value: object) -> str:
    """Return a step's result as JSON text (SPEC R5).

    Step results are not held to R2: they go through Django's
    ``DjangoJSONEncoder``, so a ``datetime``, ``Decimal`` or ``UUID`` is stored
    as a string, and the handler gets that stored form back on the first call
    as on a replay. Raises ``TypeError``/``ValueError`` naming what could not be
    encoded (nesting too deep, an int too long to print and a value past
    ``VALUE_MAX_BYTES`` included).
    """
    try:
        text = _dumps(value, cls=DjangoJSONEncoder, allow_nan=False)
    except RecursionError:
        raise ValueError("the value is nested too deeply for JSON") from None
    try:
        return _bounded(text, "result")
    except NotQueueSafe as exc:
        raise ValueError(str(exc)) from None


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


def _finite(literal: str) -> float:
    """Refuse a number too large for a float (``1e999``): Python would read it as ``inf``."""
    number = float(literal)
    if math.isinf(number):
        raise ValueError(f"the number {literal[:40]} is too large for a float")
    return number


def decode(text: str | None, *, empty: Any = None) -> Decoded:
    """Decode a stored JSON column without raising.

    ``None`` (SQL NULL) decodes to *empty*; text that does not parse comes back
    with ``error`` set to the parser's reason and ``raw`` holding the text.
    """
    if text is None:
        return Decoded(empty)
    try:
        return Decoded(
            json.loads(text, parse_constant=_refuse_constant, parse_float=_finite), raw=text
        )
    except (ValueError, TypeError) as exc:
        return Decoded(empty, error=f"{type(exc).__name__}: {exc}", raw=text)
    except RecursionError:
        return Decoded(empty, error="RecursionError: nested too deeply to decode", raw=text)


def storable_text(text: str) -> str:
    """Return *text* as every backend can store it in a text column (SPEC §12).

    For text we write ourselves (an error message, an operator's name): a lone
    surrogate becomes a ``\\udXXX`` escape and a NUL -- which PostgreSQL
    refuses in text -- becomes ``\\x00``. Text that needs neither is returned
    as it is.
    """
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
