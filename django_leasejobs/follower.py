"""The run a drive drives next, claimed ahead: its BEGIN rides in this pass's commit (§13).

A short pass that finishes writes its commit (R3), and the pass after it
then writes its BEGIN (L4): two commits, each waiting for its own flush of
the database's log, which is most of what a short pass costs. When the next
run of the drive is already claimed ahead (:mod:`.claims_ahead`), its BEGIN can
ride in this pass's commit instead -- one statement on PostgreSQL, one
transaction elsewhere (:func:`~.store.next_begin.commit_and_begin`) -- so the
two share one commit. Nothing about either changes: the commit is fenced on
this pass's owner token (L6), the BEGIN on the next claim's, with the same
margin of its lease checked first by this worker's clock and then by the
database's (L4); each wins or loses on its own.

A :class:`Follower` is that next run, as the drive hands it to the pass
before it. The pass's conclusion takes its claim just before committing --
only then, so that a drive told to stop, or a limit reached, begins nothing
more -- and says what the BEGIN did. The drive then drives that run next
whatever it is told meanwhile: a pass that began is in flight (W5).
"""

from __future__ import annotations

from collections.abc import Callable

from .claims_ahead import Claims
from .leases import Claimed

__all__ = ["Follower"]


class Follower:
    """The next run of a drive, held among its claims made ahead (§13, L4)."""

    __slots__ = ("_claims", "_may", "_taken", "claimed", "run_id")

    def __init__(self, claims: Claims, run_id: str, may: Callable[[], bool]) -> None:
        self._claims = claims
        self.run_id = run_id
        #: Whether the drive may begin another pass now: not stopping, within its limit.
        self._may = may
        self._taken: tuple[str, Claimed] | None = None
        #: Once its BEGIN was sent with a commit: the claim, ``begun`` saying whether it wrote.
        self.claimed: Claimed | None = None

    def claim_to_carry(self) -> Claimed | None:
        """The next run's claim, taken out of the claims made ahead, if its BEGIN may go now.

        ``None`` when the drive may not begin another pass, or the claim is
        no longer held here (the keeper gave it back behind a long pass) or
        has too little of its lease left to begin (then it is given back,
        uncharged, as :meth:`.Claims.pop` does).
        """
        if self._taken is not None or not self._may():
            return None
        self._taken = self._claims.withdraw(self.run_id)
        return None if self._taken is None else self._taken[1]

    def sent(self, began: bool | None) -> None:
        """What the BEGIN carried in the commit did: wrote, did not, or (``None``) never ran.

        Never ran -- the statement failed, so nothing of it was written --
        puts the claim back among those held, to begin alone in its turn.
        Not called at all when the connection was lost with the statement in
        flight: whether it began is not known, and the claim is left to its
        lease (L3 charges it only if it had begun).
        """
        assert self._taken is not None, "sent() without claim_to_carry()"
        prefix, claimed = self._taken
        if began is not None:
            self.claimed = claimed._replace(begun=began)
            return
        self._claims.restore(self.run_id, prefix, claimed)
        self._taken = None
