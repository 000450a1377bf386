"""The one loop that drives claimed runs one after another, whatever the concurrency (W5, §13).

A drive at ``concurrency=1`` drives its snapshot's runs on its own thread;
a pool thread drives the run or the *stretch* of runs it was handed
(:mod:`.dispatcher`). Both are :func:`drive_in_turn` over a :class:`Line`:
where the runs come from and how each is claimed differ, the loop does not.
Each run is driven to the end of its drive's passes, and the commit that
ends it carries the BEGIN of the next run where that one was claimed ahead
(:mod:`.follower`) -- a run whose pass began so is driven next, even by a
drive told to stop, for its pass is in flight.

What each run came to is a :class:`Ran`, handed back as the loop goes: the
line's owner counts it (:mod:`.cursor`) before the loop asks for the next.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple, Protocol

from django.db import DatabaseError

from .due import DriveOptions, DueKey, Turn
from .errors import connection_lost
from .execute import drive_run
from .follower import Follower
from .outcome import Outcome

if TYPE_CHECKING:
    from .claims_ahead import Claims
    from .leases import Claimed
    from .registry import Job

__all__ = ["NOT_WON", "REFUSED", "SKIPPED", "Line", "Ran", "drive_in_turn"]

logger = logging.getLogger("django_leasejobs")


class Ran(NamedTuple):
    """What one run's turn came to."""

    outcomes: list[Outcome]
    seconds: float | None = None
    #: An error driving the run (a database error, or a bug: R9), and whether it was a
    #: database error that lost this thread's connection (D4).
    error: BaseException | None = None
    lost: bool = False
    #: No pass began: the drive was stopping, or a claim made ahead was given back (L2).
    skipped: bool = False
    #: Whether this process held the run's claim (a stretch's claim may go elsewhere).
    won: bool = True
    #: The thread had no connection and the database refused one: nothing was claimed (F10).
    refused: bool = False


#: A run whose claim went to another worker.
NOT_WON = Ran([], won=False)
#: A run whose pass never began here, uncharged (L2).
SKIPPED = Ran([], skipped=True)
#: A run its thread could not claim for want of a connection: due again, uncharged (F10).
REFUSED = Ran([], refused=True)


class Line(Protocol):
    """The runs one loop drives, in their order, and the claims made ahead for them."""

    claims: Claims

    def next(self) -> DueKey | None:
        """The next run to drive, or ``None`` when the line is spent (or told to stop)."""

    def claim(self, key: DueKey, spec: Job) -> Claimed | Ran | None:
        """*key*'s claim; ``None``: its pass claims it; a :class:`Ran`: it is not driven."""

    def follow(self) -> DueKey:
        """The next run: its pass began in the last commit, so it is driven next."""

    def follower(self) -> Follower | None:
        """The next run, if claimed ahead: its BEGIN may ride in this run's last commit."""

    def noted(self, key: DueKey, ran: Ran) -> None:
        """What *key*'s run came to, before the line is asked for the next one."""


def drive_in_turn(line: Line, options: DriveOptions) -> Iterator[tuple[DueKey, Ran]]:
    """Drive *line*'s runs one after another; yield each with what it came to (W5, §13).

    A run whose connection was lost ends the loop: no pass begins on a
    connection that is gone, and the drive's owner sets the claims aside.
    """
    carried: Claimed | None = None  # the next run's claim, its BEGIN sent with the last commit
    while True:
        key = line.follow() if carried is not None else line.next()
        if key is None:
            return
        spec = options.jobs[key.job]
        claimed: Claimed | Ran | None = carried
        follower: Follower | None = None
        try:
            if carried is None:
                claimed = line.claim(key, spec)
            if isinstance(claimed, Ran):
                ran = claimed
            else:
                follower = line.follower()
                started = time.monotonic()
                with line.claims.watch():
                    outcomes = drive_run(Turn(key, spec, claimed, follower), options)
                ran = Ran(outcomes, time.monotonic() - started)
        except DatabaseError as exc:  # D4: this run only, unless the connection is gone
            ran = Ran([], error=exc, lost=connection_lost(options.using))
        except Exception as exc:  # nothing one run does stops the drive (R9)
            ran = Ran([], error=exc)
        finally:
            carried = None if follower is None else follower.claimed
        line.noted(key, ran)
        yield key, ran
        if ran.lost:
            return
