"""The same run's next pass, claimed and begun in this pass's advance (L2, L4, §13).

A drive that runs several passes of one run (``max_passes``, ``rundueJobs
--max-passes``) ends each pass with its commit (R3), and the pass after it
starts with a claim (L2) and a BEGIN (L4): three commits between one pass's
work and the next's, each a round trip waiting for its flush of the
database's log -- most of what a pass of a ``p.walk()`` backfill costs
beyond its batch. Where the backend's ``UPDATE`` returns rows, the advance
writes the next pass's lease in place of the one it releases and reads the
row back as a claim reads it (:func:`~.store.next_pass.commit_and_go_on`):
one commit for the three.

Nothing about the passes changes: the advance is fenced on this pass's
owner token (L6), the next pass has an owner token of its own and a full
lease counted from before the statement was sent (L1), a queue paused
meanwhile refuses it as BEGIN would (W6), and it reads back exactly what
the advance committed. It is taken only at the commit, so that a drive
told to stop while the pass ran begins nothing more; once taken, the next
pass is in flight, and the drive runs it whatever it is told meanwhile.
A job with a limit goes the long way: its BEGIN takes a slot or a rate
token (C2, C3).
"""

from __future__ import annotations

from collections.abc import Callable

from .leases import Claimed

__all__ = ["GoingOn"]


class GoingOn:
    """A drive's leave to go on with the run after this pass, and what the advance claimed."""

    __slots__ = ("_more", "_stop", "claimed")

    def __init__(self, *, more: bool, stop: Callable[[], bool]) -> None:
        #: Whether the drive has passes left for the run after this one.
        self._more = more
        #: Whether the drive was told to stop: then no new pass begins (W5).
        self._stop = stop
        #: Once the advance went on: the next pass's claim, begun.
        self.claimed: Claimed | None = None

    def may(self) -> bool:
        """Whether the next pass may begin now: passes left, and the drive not stopping."""
        return self._more and not self._stop()
