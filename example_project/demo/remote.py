"""A fake CRM API: contacts served in pages, with opaque page tokens.

It stands in for the slow, paged, sometimes failing HTTP API a real import
talks to, without the network: the same source always yields the same
contacts (generated from a seed), so the demo can be run, killed and resumed
and the result checked against what the "remote" holds.
"""

from __future__ import annotations

import base64
import binascii
import random
from typing import TypedDict

__all__ = ["CONTACTS", "PAGE_SIZE", "Page", "RemoteContact", "contact", "page"]

#: How many contacts each source holds, and how many one page returns.
CONTACTS = 1_000
PAGE_SIZE = 100

_FIRST = ["Ada", "Alan", "Barbara", "Claude", "Edsger", "Frances", "Grace", "Niklaus", "Radia"]
_LAST = ["Allen", "Dijkstra", "Hopper", "Kay", "Liskov", "Perlman", "Shannon", "Turing", "Wirth"]


class RemoteContact(TypedDict):
    id: str
    name: str
    email: str


class Page(TypedDict):
    items: list[RemoteContact]
    next: str | None
    total: int


def contact(source: str, index: int) -> RemoteContact:
    """Return the *index*-th contact of *source*; the same arguments give the same contact."""
    # A str seed is hashed with SHA-512, so it is stable across processes
    # (unlike hash(), which PYTHONHASHSEED varies).
    rng = random.Random(f"{source}:{index}")
    first, last = rng.choice(_FIRST), rng.choice(_LAST)
    return {
        "id": f"{source}-{index:05d}",
        "name": f"{first} {last}",
        "email": f"{first}.{last}.{index}@example.com".lower(),
    }


def page(source: str, token: str | None = None) -> Page:
    """Return one page of *source*'s contacts.

    *token* is ``None`` for the first page, else the ``next`` of the page
    before. ``next`` is ``None`` on the last page. ``total`` is how many
    contacts the source holds, as CRMs often report alongside each page.

    Raises ``ValueError`` for a token this source did not hand out.
    """
    offset = 0 if token is None else _decode(source, token)
    end = min(offset + PAGE_SIZE, CONTACTS)
    return {
        "items": [contact(source, index) for index in range(offset, end)],
        "next": _encode(source, end) if end < CONTACTS else None,
        "total": CONTACTS,
    }


def _encode(source: str, offset: int) -> str:
    # Opaque on purpose: the import must store the token and hand it back,
    # never compute the next page itself.
    return base64.urlsafe_b64encode(f"{source}:{offset}".encode()).decode().rstrip("=")


def _decode(source: str, token: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        token_source, _, offset = raw.rpartition(":")
        value = int(offset)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ValueError(f"not a page token: {token!r}") from None
    if token_source != source or not 0 < value < CONTACTS:
        raise ValueError(f"page token {token!r} was not handed out for source {source!r}")
    return value
