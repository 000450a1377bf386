"""Claims and BEGINs whose reply was lost, given back once the database answers (SPEC F3).

A claim (L2) or a BEGIN (L4) is one statement the database may apply and
then fail to answer: the connection is cut after the server received the
commit. The worker cannot tell whether it holds the run, so it holds
nothing: the pass is abandoned before its handler is called. Left at that,
the run would wait out the whole lease -- and a BEGIN that did apply would
then read as a pass that began and stopped reporting (L3): charged an
attempt, or held when not safe to repeat, for a handler that never ran.

So such a statement notes its owner token here (:func:`note`) -- only when
the connection is gone, so the token is never used again by this process --
and the worker gives each back (:func:`give_back_unanswered`) once the
database answers again: at the end of the drive, and at the start of the
next. The give-back is fenced on that owner token alone, so it changes
nothing once another worker has the run, and it charges nothing:

* a fresh claim, begun or not: due again at once, unclaimed and unbegun,
  its attempts as they were;
* a takeover claim (L3) that was never begun: due again at once *as the
  takeover it was* -- begun, with the one attempt its claim charged given
  back -- so the next claim charges that attempt again, or holds the run
  when its job is not safe to repeat. Given back as a fresh claim, it would
  run a handler L3 says must wait for an operator.

A worker that dies meanwhile leaves them to their lease's expiry: a takeover
then (L3), the safe side. Claims made ahead (:mod:`.ahead`) that a drive cut
off could not give back are noted here too, and given back the same way.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

from django.db import DatabaseError, transaction
from django.db.models import F

from django_leasejobs.errors import connection_lost, drop_lost_connections, one_line

from .base import alias, conflicts_retried, fenced, notify, now

__all__ = ["Unanswered", "give_back_unanswered", "note", "noted", "unanswered_if_lost"]

logger = logging.getLogger("django_leasejobs")


class Unanswered(NamedTuple):
    """A claim this process abandoned: its run, its owner token, and whether it was a takeover."""

    run_id: str
    owner: str
    #: The claim itself was a takeover (L3) whose reply was lost; it was never begun.
    took_over: bool = False


#: Noted by the pass threads (W5), given back by the drive's: guarded by :data:`_lock`.
_noted: dict[str, Unanswered] = {}
_lock = threading.Lock()


def note(run_id: str, owner: str, *, took_over: bool = False) -> None:
    """Note *owner*'s claim of *run_id* as abandoned: given back by :func:`give_back_unanswered`.

    Only for a token this process will never use again: its pass was
    abandoned before the handler was called.
    """
    with _lock:
        _noted[owner] = Unanswered(run_id, owner, took_over)


@contextmanager
def unanswered_if_lost(*claims: Unanswered) -> Iterator[None]:
    """Around a claim or BEGIN: on a database error that lost the connection, :func:`note` them.

    A connection that still works had its statement rolled back: nothing of
    it was applied, and nothing needs giving back. A lost one may have
    applied it; the error still goes to the caller, whose pass is abandoned.
    """
    try:
        yield
    except DatabaseError:
        if connection_lost(alias()):
            for claim in claims:
                note(claim.run_id, claim.owner, took_over=claim.took_over)
        raise


def noted() -> list[Unanswered]:
    """The claims waiting to be given back."""
    with _lock:
        return list(_noted.values())


def give_back_unanswered() -> int:
    """Give back every noted claim this connection can reach (F3); return how many were held.

    A connection an error left unusable is reopened first. One that still
    cannot reach the database leaves them noted for the next drive, and
    never fails the caller's drive: the snapshot will say if the database
    is gone.
    """
    waiting = noted()
    if not waiting:
        return 0
    drop_lost_connections()
    given = 0
    for claim in waiting:
        try:
            given += _give_back(claim)
        except DatabaseError as exc:
            logger.info("Claims whose reply was lost not given back yet (%s)", one_line(exc))
            break
        with _lock:
            _noted.pop(claim.owner, None)
    if given:
        logger.warning("Claims whose reply was lost given back uncharged: %s", given)
    return given


@conflicts_retried
def _give_back(claim: Unanswered) -> bool:
    """Release *claim*, fenced on its owner token, charging nothing; whether it was still held."""
    at = now()
    mine = fenced(claim.run_id, claim.owner)
    with transaction.atomic(using=alias()):
        if claim.took_over:
            # Due now as the begun lease the takeover found, its charge undone: the
            # next claim is a takeover again, and charges -- or holds -- it once (L3).
            given = mine.unbegun().update(
                attempts=F("attempts") - 1,
                lease_began_at=at,
                next_attempt_at=at,
                updated_at=at,
            )
        else:
            given = mine.update(
                lease_owner=None, lease_began_at=None, next_attempt_at=at, updated_at=at
            )
        if given:
            notify(alias())
    return bool(given)
