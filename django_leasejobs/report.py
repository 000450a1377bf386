"""What a drive did, as its caller reads it: the :class:`DriveReport` (SPEC §3).

Failed runs are data here, never exceptions: ``rundueJobs`` prints the
report, ``--json`` dumps it, and ``--max-seconds`` merges several into one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from .states import PassOutcome

if TYPE_CHECKING:
    from .outcome import Outcome

__all__ = ["DriveReport", "Note"]


class Note(NamedTuple):
    """An error or warning about one run, for the report."""

    run_id: str
    text: str


@dataclass
class DriveReport:
    """What one drive did. Failed runs are data here, never exceptions.

    One count per :class:`~django_leasejobs.states.PassOutcome`.
    """

    attempted: int = 0
    advanced: int = 0
    completed: int = 0
    retrying: int = 0
    failed: int = 0
    superseded: int = 0
    deferred: int = 0
    held: int = 0
    #: Passes their job's limit refused (C2, C3): nothing ran, nothing was charged.
    throttled: int = 0
    errors: list[Note] = field(default_factory=list)
    warnings: list[Note] = field(default_factory=list)
    #: Set when the drive stopped early because the database went away.
    aborted: str = ""

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["errors"] = [note._asdict() for note in self.errors]
        data["warnings"] = [note._asdict() for note in self.warnings]
        return data

    @property
    def idle(self) -> bool:
        """Whether the drive began nothing and has nothing to say: no pass, no error, no warning.

        What a ``--loop`` worker does not print at the default verbosity (D5).
        Runs found waiting for their limit (``throttled``: nothing ran, C2,
        C3) or in a paused queue (stepped over, W6) are no news: a worker
        polling them would otherwise print a line of zeros every interval.
        """
        counts = ("attempted", *(name for name in _COUNTS.values() if name != "throttled"))
        return not (any(getattr(self, name) for name in counts) or self.errors or self.warnings)

    def tally(self, run_id: str, outcome: Outcome) -> None:
        """Count one pass's outcome, and note its error or warning."""
        field = _COUNTS[outcome.status]
        setattr(self, field, getattr(self, field) + 1)
        if outcome.error and outcome.status in _REPORTED:
            self.errors.append(Note(run_id, outcome.error))
        if outcome.warning:
            self.warnings.append(Note(run_id, outcome.warning))

    def merge(self, other: DriveReport) -> None:
        """Add *other*'s counts and notes to this report: several drives read as one (W3)."""
        for name in ("attempted", *_COUNTS.values()):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.errors += other.errors
        self.warnings += other.warnings
        self.aborted = self.aborted or other.aborted

    def summary(self) -> str:
        counts = " ".join(
            f"{name}={getattr(self, name)}" for name in ("attempted", *_COUNTS.values())
        )
        return f"{counts} errors={len(self.errors)} warnings={len(self.warnings)}"


#: The report's count for each pass outcome: its field is named after it.
_COUNTS = {outcome: str(outcome.value) for outcome in PassOutcome}
#: Outcomes whose error is a run's failure the report lists (a retry, a failure, a hold).
_REPORTED = frozenset({PassOutcome.RETRYING, PassOutcome.FAILED, PassOutcome.HELD})
