"""What a drive knows of a due run, and what every pass of the drive obeys (SPEC D1-D3, W5).

Three frozen values travel down a drive's path: a :class:`DueKey` is one
run as the snapshot read it; :class:`DriveOptions` are the drive's bounds,
the same for every run it drives; a :class:`Turn` is one run's turn to be
driven -- its key, its job, and its claim when it was claimed ahead. They
are values, not state: whatever a drive counts as it goes lives in the
cursor and the tally (:mod:`.cursor`), never in what a pass is handed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from .follower import Follower
    from .leases import Claimed
    from .registry import Job

__all__ = ["DriveOptions", "DueKey", "Turn"]


class DueKey(NamedTuple):
    """One due run as the drive's snapshot read it (D1)."""

    id: str
    job: str
    took_over: bool
    #: The run's ``limit_key`` ("" for none): which limits it counts against (§14).
    limit_key: str = ""
    #: The run's queue: a queue found paused during the drive is stepped over (W6).
    queue: str = ""


@dataclass(frozen=True, slots=True)
class DriveOptions:
    """A drive's bounds, handed unchanged to each of its runs (D2, D3, W5)."""

    #: The database the runs are claimed on: the router's write database for runs.
    using: str
    #: The drive's jobs by name: a key's ``job`` is one of them.
    jobs: Mapping[str, Job]
    #: Passes at most per run in one drive (D3).
    max_passes: int
    #: Whether the drive was told to stop: no new pass begins once it says so (W5).
    stop: Callable[[], bool]
    #: What a handler's ``p.interrupted()`` asks (``None``: never interrupted).
    interrupt: Callable[[], bool] | None = None


@dataclass(frozen=True, slots=True)
class Turn:
    """One run's turn to be driven: what :func:`~.execute.drive_run` needs of it."""

    key: DueKey
    spec: Job
    #: Its claim, made ahead of its turn (§13) or carried in the last commit; ``None``:
    #: its first pass claims it (L2) or takes it over (L3).
    claimed: Claimed | None = None
    #: The drive's next run, claimed ahead: its BEGIN may ride in this run's last commit.
    follower: Follower | None = None
