"""How an exception becomes ``last_error`` text (SPEC §10).

A message can quote a secret (a token in a URL, a password in a DSN), so with
``REDACT_ERRORS`` only the exception's type is kept; otherwise the type and
message, cut to ``ERROR_MAX_LENGTH``. Database URLs with credentials are
masked either way.
"""

from __future__ import annotations

import re

from .conf import conf

__all__ = ["describe", "mask_urls"]

_URL_CREDENTIALS = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s:@]*(:[^/\s@]*)?@")


def mask_urls(text: str) -> str:
    """Replace ``user:password@`` in any URL in *text* with ``***@``."""
    return _URL_CREDENTIALS.sub(r"\1***@", text)


def describe(exc: BaseException, prefix: str = "") -> str:
    """Return the stored form of *exc*: ``Type: message`` (or just ``Type``)."""
    name = type(exc).__qualname__
    if conf.REDACT_ERRORS:
        text = name
    else:
        message = str(exc).strip()
        text = f"{name}: {message}" if message else name
    text = mask_urls(prefix + text)
    limit = conf.ERROR_MAX_LENGTH
    return text if len(text) <= limit else text[: limit - 1] + "…"
