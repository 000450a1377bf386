"""Long values folded away on the run page (A7): a step result of 100 items is one line.

A value past :data:`FOLD_LINES` lines or :data:`FOLD_CHARS` characters is
shown inside a closed ``<details>`` whose summary says what it is and how
big ("list of 100 items, 4 KB — show"); the browser opens it, no script
needed. What is folded is the same escaped block as before (A2): folding
changes what shows first, never what is shown.
"""

from __future__ import annotations

from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

__all__ = ["FOLD_CHARS", "FOLD_LINES", "described", "fold", "is_long", "size"]

#: Longer than this (in lines or characters), a value is folded.
FOLD_LINES = 20
FOLD_CHARS = 2_000


def is_long(text: str) -> bool:
    """Whether *text* is past :data:`FOLD_LINES` lines or :data:`FOLD_CHARS` characters."""
    return len(text) > FOLD_CHARS or text.count("\n") >= FOLD_LINES


def size(text: str) -> str:
    """How much *text* takes as UTF-8: ``812 bytes``, ``4 KB``, ``1.2 MB``."""
    n = len(text.encode("utf-8", "surrogatepass"))
    if n < 1024:
        return ngettext("%(n)d byte", "%(n)d bytes", n) % {"n": n}
    if n < 1024 * 1024:
        return _("%(n)d KB") % {"n": round(n / 1024)}
    return _("%(n).1f MB") % {"n": n / (1024 * 1024)}


def described(value: object) -> str:
    """What a decoded JSON value is, in words: ``list of 100 items``, ``object with 3 keys``."""
    if isinstance(value, list):
        return ngettext("list of %(n)d item", "list of %(n)d items", len(value)) % {"n": len(value)}
    if isinstance(value, dict):
        return ngettext("object with %(n)d key", "object with %(n)d keys", len(value)) % {
            "n": len(value)
        }
    if isinstance(value, str):
        return ngettext("text of %(n)d character", "text of %(n)d characters", len(value)) % {
            "n": len(value)
        }
    return _("value")


def fold(block: SafeString, text: str, what: str) -> SafeString:
    """*block* (the escaped rendering of *text*) folded if *text* is long, else as it is.

    The summary says *what* it is and how big, and that a click shows it.
    """
    if not is_long(text):
        return block
    return format_html(
        '<details class="leasejobs-fold"><summary>{}, {} <span class="leasejobs-fold-hint">'
        "— {}</span></summary>{}</details>",
        what,
        size(text),
        _("show"),
        block,
    )
