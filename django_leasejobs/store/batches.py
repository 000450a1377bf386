"""Starting many runs at once: :func:`start_many` (SPEC §3, revision 2).

Each item starts or joins exactly as :func:`~.starts.start` would (R1), yet
the batch costs a constant number of statements per chunk, not one per item:
every payload is checked first, then each chunk is one ``INSERT`` that lets
taken keys pass, and one read of the live runs holding the keys it found
taken.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import connections

from django_leasejobs.codec import encode
from django_leasejobs.definition import Definition
from django_leasejobs.errors import refused_when_full
from django_leasejobs.exceptions import StartContended
from django_leasejobs.ids import new_id
from django_leasejobs.models import INSTANCE_LENGTH, Run
from django_leasejobs.querysets import live_key
from django_leasejobs.states import LIVE_STATUSES, RunOrigin

from .base import alias, conflicts_retried, runs
from .starts import (
    START_ROUNDS,
    Row,
    StartResult,
    check_key,
    check_run_after,
    insert,
    join,
    limit_key_of,
    routed,
)

__all__ = ["CHUNK_MAX", "start_many"]

#: The most runs one INSERT of a batch carries: a bound on one statement's size
#: and on how long it holds its locks, not a parameter limit (the rows travel
#: as arrays, or as one JSON text; MariaDB's INSERT has no limit).
CHUNK_MAX = 10_000


@conflicts_retried
def start_many(
    spec: Definition, items: Iterable[tuple[str, Any]], *, run_after: datetime | None = None
) -> list[StartResult]:
    """Start or join one run of *spec* per ``(instance, payload)`` item (``start_many()``).

    What ``start_many()`` does once it has found the job.
    """
    if not spec.coalesce:
        raise ValueError(f"runs of {spec.name!r} are each their own: start them one by one")
    check_run_after(run_after)
    pairs = list(items)
    rows: dict[str, Row] = {}  # by instance: the first item of each instance
    for index, pair in enumerate(pairs):
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise TypeError(f"items.{index} must be an (instance, payload) pair, got {pair!r}")
        instance, payload = pair
        check_key(f"items.{index}.instance", instance, INSTANCE_LENGTH)
        text = encode(payload, f"items.{index}.payload")
        if instance not in rows:
            limited = limit_key_of(spec, payload, f"items.{index} limit key")
            rows[instance] = Row(new_id(), instance, text, live_key(spec.name, instance), limited)
    found: dict[str, StartResult] = {}
    # In key order: concurrent batches then wait on each other's keys in one
    # order, so overlapping batches cannot deadlock (§12).
    pending = sorted(rows.values(), key=_key)
    with refused_when_full(spec.name):  # F8: a clear error; the chunk refused wrote nothing
        for start in range(0, len(pending), CHUNK_MAX):
            found |= _start_chunk(spec, pending[start : start + CHUNK_MAX], run_after)
    results = []
    for instance, _payload in pairs:
        result = found[instance]
        results.append(result)
        # A repeat of an instance joins the run its first item started (or joined).
        found[instance] = StartResult(result.run, joined=True)
    return results


def _start_chunk(
    spec: Definition, chunk: list[Row], run_after: datetime | None
) -> dict[str, StartResult]:
    """Insert the chunk; join the live runs of the keys it found taken. By instance."""
    found: dict[str, StartResult] = {}
    route = routed(spec, None, None)  # the job's own
    for _ in range(START_ROUNDS):
        for run in insert(spec.name, RunOrigin.API, chunk, route, run_after=run_after):
            found[run.instance] = StartResult(run, joined=False)
        taken = [row for row in chunk if row.instance not in found]
        if not taken:
            return found
        live = _holders([_key(row) for row in taken])
        for row in taken:
            holder = live.get(_key(row))
            if holder is not None and holder.status in LIVE_STATUSES:
                found[row.instance] = StartResult(holder, joined=True)
            elif holder is not None:
                # Cancelled mid-pass, or stranded: the one-at-a-time path knows what to do.
                joined = join(_key(row), row.payload, again=False)
                if joined is not None:
                    found[row.instance] = StartResult(joined, joined=True)
        # Keys whose live run finished meanwhile are free again: insert those once more.
        chunk = [row._replace(id=new_id()) for row in chunk if row.instance not in found]
        if not chunk:
            return found
    raise StartContended(
        f"could not start or join {len(chunk)} runs of {spec.name!r}: keys kept flipping"
    )


def _holders(keys: list[str]) -> dict[str, Run]:
    """The runs holding *keys*: one read per chunk of the backend's parameter limit."""
    limit = connections[alias()].features.max_query_params or len(keys)
    held: dict[str, Run] = {}
    for start in range(0, len(keys), limit):
        held |= {
            run.live_key: run for run in runs().filter(live_key__in=keys[start : start + limit])
        }
    return held


def _key(row: Row) -> str:
    """*row*'s coalescing key: every row of a batch has one (start_many() coalesces)."""
    assert row.live_key is not None
    return row.live_key
