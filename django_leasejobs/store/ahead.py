"""Claims made ahead of their turn: several short passes' claims in one statement (§13, L2).

A no-op pass costs its claim, BEGIN and its commit. When a job's passes are
short, the drive claims the next few of its due runs in one statement
instead of one each (:mod:`~django_leasejobs.pacing` decides how many). Each
run gets an owner token of its own -- the batch's random prefix and the end
of the run's id -- so it is then begun (L4), fenced (L6) and concluded
exactly as if it had been claimed alone. A claim that never began costs
nothing (L2), and the drive gives back whatever it did not reach.
"""

from __future__ import annotations

from datetime import timedelta
from functools import cache
from typing import Any

from django.db import transaction
from django.db.models import CharField, DurationField
from django.db.models.functions import Concat, Substr

from django_leasejobs.clock import plus
from django_leasejobs.errors import READ_ERRORS, why_unreadable
from django_leasejobs.exceptions import UnreadableRow
from django_leasejobs.ids import new_id
from django_leasejobs.models import Run
from django_leasejobs.querysets import RunQuerySet

from .base import alias, conflicts_retried, notify, now, runs
from .claims import read_claimed
from .sql import AS_IS, KEY, Slots, Statement, returns_rows
from .unanswered import Unanswered, unanswered_if_lost

__all__ = ["OWNED_FROM", "Ahead", "claim_ahead", "give_back", "owner_of"]

#: A token claimed ahead is the batch's prefix, then the run's id from here on
#: (a ULID's last 16 characters, its random part): 26 characters in all.
OWNED_FROM = 10


def owner_of(prefix: str, run_id: str) -> str:
    """The owner token a batch with *prefix* gave run *run_id* (as the SQL writes it)."""
    return prefix + run_id[OWNED_FROM:]


#: A run claimed ahead, or one claimed but unreadable (R9), by id.
Ahead = dict[str, Run | UnreadableRow]


# functools.cache is thread-safe; a race builds one statement twice, to equal values.
@cache
def _claim_ahead(count: int) -> Statement:
    """L2 for *count* runs in one statement: a fresh claim each, never a takeover."""

    def build(runs: RunQuerySet[Run], s: Slots) -> tuple[RunQuerySet[Run], dict[str, Any]]:
        ids = [getattr(s, f"run_{n}") for n in range(count)]
        token = Concat(s.prefix, Substr("id", OWNED_FROM + 1), output_field=CharField())
        values = {
            "lease_owner": token,
            "lease_holder": s.holder,
            "next_attempt_at": plus(s.now, s.lease),
            "updated_at": s.now,
        }
        return runs.claimable(s.now, took_over=False).filter(pk__in=ids), values

    fields: dict[str, Any] = {f"run_{n}": KEY for n in range(count)}
    fields |= {"prefix": CharField(), "lease": DurationField(), "holder": AS_IS}
    return Statement(fields, build)


@conflicts_retried
def claim_ahead(run_ids: list[str], lease: timedelta, holder: str) -> tuple[str, Ahead]:
    """Claim *run_ids* at once, each under its own token; return the prefix and what was won.

    A run missing from the result was claimed elsewhere first. One that was
    won but cannot be read back (R9, §12) comes as its :class:`UnreadableRow`.
    A connection lost on the way may have applied the claims: each is noted,
    to be given back (F3).
    """
    prefix = new_id()[-OWNED_FROM:]  # random: a ULID's first characters are its time
    claims = [Unanswered(run_id, owner_of(prefix, run_id)) for run_id in run_ids]
    with unanswered_if_lost(*claims):
        return prefix, _claimed_ahead(run_ids, prefix, lease, holder)


def _claimed_ahead(run_ids: list[str], prefix: str, lease: timedelta, holder: str) -> Ahead:
    using = alias()
    statement = _claim_ahead(len(run_ids))
    values: dict[str, Any] = {f"run_{n}": run_id for n, run_id in enumerate(run_ids)}
    values |= {"prefix": prefix, "lease": lease, "holder": holder}
    try:
        if returns_rows(using):
            return {run.pk: run for run in statement.fetch_all(using, **values)}
        if not statement.run(using, **values):
            return {}
        owners = [owner_of(prefix, run_id) for run_id in run_ids]
        won = runs().filter(pk__in=run_ids).owned_by_any(owners)
        return {run.pk: run for run in won}
    except READ_ERRORS as exc:
        why_unreadable(exc, using)  # raises if the connection is lost, not a row
    # A row in the batch cannot be read: read each back alone, so only it fails.
    found: Ahead = {}
    for run_id in run_ids:
        try:
            run = read_claimed(run_id, owner_of(prefix, run_id))
        except UnreadableRow as unreadable:
            found[run_id] = unreadable
        else:
            if run is not None:
                found[run_id] = run
    return found


@conflicts_retried
def give_back(prefix: str, run_ids: list[str]) -> int:
    """Release claims made ahead and never begun: due again now, uncharged (L2, L8).

    Announced (W2) in the same transaction, so an idle worker takes them.
    """
    at = now()
    owners = [owner_of(prefix, run_id) for run_id in run_ids]
    with transaction.atomic(using=alias()):
        given = (
            runs()
            .filter(pk__in=run_ids)
            .owned_by_any(owners)
            .unbegun()
            .update(lease_owner=None, next_attempt_at=at, updated_at=at)
        )
        if given:
            notify(alias())
    return given
