"""What a run's pass was doing when it stopped: the step in flight (SPEC A8).

A job not safe to repeat records each step's name before the step's
function runs (:class:`~.ledger.Ledger`), and clears that mark with the
attempt's record. So when such a pass stops mid-way -- the worker killed,
cut off, paused past its lease -- and the run is held (L3), its ledger says
which step had begun and never finished: the one that may have
half-happened (a card charged, a mail sent), which the operator checks
before releasing the run. Read here for the run page, the held list, the
release confirmation and ``leasejobs_status``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.db import router
from django.db.models import BooleanField, ExpressionWrapper, Q

from .models import Step

if TYPE_CHECKING:
    from .models import Run

__all__ = ["NOTHING", "InFlight", "in_flight", "in_flight_of"]


@dataclass(frozen=True)
class InFlight:
    """A run's step in flight, or the last step it completed when none is."""

    #: The step begun and never recorded: it may have half-happened.
    step: str | None = None
    #: When that step began, on the database's clock.
    began_at: datetime | None = None
    #: With no step in flight: the last step recorded complete, if any (``None``: the
    #: pass stopped before its first step).
    last_completed: str | None = None


#: A run whose ledger holds nothing: no step had begun.
NOTHING = InFlight()

#: (name, completed, began_at, recorded_at) of one ledger row.
_Row = tuple[str, bool, datetime | None, datetime]


def _of(rows: Iterable[_Row]) -> InFlight:
    """The step in flight among one run's ledger rows (the latest begun, should there be two)."""
    begun = [(began, name) for name, completed, began, _ in rows if not completed and began]
    if begun:
        began_at, name = max(begun)
        return InFlight(step=name, began_at=began_at)
    done = [(recorded, name) for name, completed, _, recorded in rows if completed]
    return InFlight(last_completed=max(done)[1]) if done else NOTHING


def _rows(
    run_ids: list[str], using: str | None
) -> Iterable[tuple[str, str, bool, datetime | None, datetime]]:
    """The ledger rows of *run_ids*, without their results (which may be long)."""
    return (
        Step.objects.using(using or router.db_for_read(Step))
        .filter(run_id__in=run_ids)
        .annotate(done=ExpressionWrapper(Q(result__isnull=False), BooleanField()))
        .values_list("run_id", "name", "done", "began_at", "recorded_at")
    )


def in_flight(run: Run) -> InFlight:
    """*run*'s step in flight, from one read of its ledger, where *run* was read."""
    return in_flight_of([run.pk], using=run._state.db)[run.pk]


def in_flight_of(run_ids: list[str], using: str | None = None) -> dict[str, InFlight]:
    """The step in flight of each of *run_ids* (every id a key), in one read.

    Read on *using* -- where the runs were read, so that a page read from the
    write alias does not name a step from a lagging replica (§12) -- or where
    the router sends reads.
    """
    by_run: dict[str, list[_Row]] = {run_id: [] for run_id in run_ids}
    for run_id, *row in _rows(run_ids, using):
        by_run[run_id].append(tuple(row))  # type: ignore[arg-type]
    return {run_id: _of(rows) for run_id, rows in by_run.items()}
