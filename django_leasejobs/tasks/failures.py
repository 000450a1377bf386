"""What a failed task shows of its exception, outside the task (SPEC §9, §10).

A task's exception can quote a secret: a token, a password in a database
URL. Wherever it leaves the worker it says no more than the run's
``last_error`` says of it (:func:`~django_leasejobs.errors.describe`): with
``REDACT_ERRORS`` only its type, and database URLs masked either way.

* **The attempt's traceback** (``TaskResult.errors``, the admin) keeps the
  frames; with ``REDACT_ERRORS`` it ends with the exception's class path,
  not its message.
* **The log.** Django's receiver for ``task_finished`` (``django.tasks``'
  and the backport's ``log_task_finished``) logs the exception it finds in
  ``sys.exc_info()`` at ERROR, message, causes and all. It is handed the
  task's own exception only when that shows nothing to hide, so error
  trackers group it as usual; otherwise a :class:`~django_leasejobs.exceptions.RedactedError`
  stands in, with the same frames and ``last_error``'s text, so the receiver
  still logs an ERROR with a traceback.
"""

from __future__ import annotations

import traceback

from django_leasejobs.codec import storable_text
from django_leasejobs.conf import conf
from django_leasejobs.errors import describe, mask_urls
from django_leasejobs.exceptions import RedactedError

__all__ = ["class_path", "for_the_log", "stored_traceback"]


def class_path(kind: type[BaseException]) -> str:
    """The dotted path ``TaskError.exception_class_path`` holds, as the column keeps it."""
    return f"{kind.__module__}.{kind.__qualname__}"[:255]


def stored_traceback(exc: BaseException) -> str:
    """The attempt's traceback; with ``REDACT_ERRORS`` its frames without any message."""
    if conf.REDACT_ERRORS:
        frames = traceback.format_tb(exc.__traceback__)
        text = "".join(["Traceback (most recent call last):\n", *frames, class_path(type(exc))])
    else:
        text = "".join(traceback.format_exception(exc))
    return storable_text(mask_urls(text))


def for_the_log(exc: BaseException) -> BaseException:
    """The exception ``task_finished``'s receivers are to see for the task's *exc*.

    *exc* itself when its traceback, as a log formats it, holds nothing
    ``last_error`` would not; else a :class:`RedactedError` in its place.
    """
    if not conf.REDACT_ERRORS:
        text = "".join(traceback.format_exception(exc))
        if mask_urls(text) == text:
            return exc
    return _stand_in(exc, {})


def _stand_in(exc: BaseException, made: dict[int, RedactedError]) -> RedactedError:
    """*exc* as a :class:`RedactedError` with its frames; its cause and context likewise.

    With ``REDACT_ERRORS`` the chain is dropped: a cause's message is the
    task's as much as its own, and the stored traceback keeps none either.
    *made* holds the stand-ins so far, by the id of what they stand for: a
    chain may loop back on itself.
    """
    if (known := made.get(id(exc))) is not None:
        return known
    safe = made[id(exc)] = RedactedError(describe(exc)).with_traceback(exc.__traceback__)
    if conf.REDACT_ERRORS:
        safe.__suppress_context__ = True  # nor whatever the raise finds being handled
        return safe
    for note in getattr(exc, "__notes__", None) or ():
        safe.add_note(mask_urls(str(note)))
    if exc.__cause__ is not None:
        safe.__cause__ = _stand_in(exc.__cause__, made)
    if exc.__context__ is not None:
        safe.__context__ = _stand_in(exc.__context__, made)
    safe.__suppress_context__ = exc.__suppress_context__
    return safe
