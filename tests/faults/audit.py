"""The invariants every fault test checks once the fault is over (§17), as assertions.

* :func:`assert_no_run_lost` -- every run reached ``done``, or the ``failed`` /
  ``held`` state a rule gives it, and none is left running;
* :func:`intervals` + :func:`assert_never_two_at_once` -- never two passes of one
  run at once, from the invocation logs each process writes *outside* the
  database (tests/faults/jobs.py, tests/jobs.py's ``chaos_walk``): a database
  cut off or restarted cannot lose that evidence;
* :func:`assert_only_committed_writes` -- no write of a pass after it lost its
  lease: counters, cursor, recorded steps and result are each exactly what the
  committed passes wrote;
* :func:`assert_side_effects` -- every step of a finished run ran, and a step ran
  twice only when its first execution was in flight at a fault.

A "fault" for a process is an instant on the machine's monotonic clock
(``time.monotonic_ns()``, the clock the logs use): when it was SIGKILLed,
SIGSTOPped or cut off from the database. A pass open at a fault of its process
counts as running until that fault and no longer: what it did later (after a
SIGCONT, a heal) it did without a lease, and the fence (L6) must have refused
it, which :func:`assert_only_committed_writes` checks.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: (start, end, pid) of one pass on the monotonic clock, in nanoseconds.
Span = tuple[int, int, int]


@dataclass(frozen=True)
class Invocation:
    """One handler invocation, as its process logged it."""

    run_id: str
    pid: int
    start: int
    end: int | None  # None: the process died (SIGKILL) before the handler ended
    how: str | None  # "returned", or the exception's class ("LeaseLost" = superseded, L6)
    attempt: int | None = None  # the pass's attempt (2 after one charged takeover, L3)


def invocations(log_dir: Path) -> list[Invocation]:
    """Every invocation in *log_dir*'s ``<pid>.log`` files (``start <run> <ns> [attempt]``,
    ``end <run> <ns> [how]``; other lines are left out). A process's threads (W5) share
    its log: an end closes the earliest invocation of its run still open there."""
    found = []
    for path in log_dir.glob("*.log"):
        pid = int(path.stem)
        open_ones: dict[str, list[tuple[int, int | None]]] = defaultdict(list)
        for line in path.read_text().splitlines():
            kind, run_id, stamp, *more = line.split()
            if kind == "start":
                open_ones[run_id].append((int(stamp), int(more[0]) if more else None))
            elif kind == "end":
                began, attempt = open_ones[run_id].pop(0)
                how = more[0] if more else None
                found.append(Invocation(run_id, pid, began, int(stamp), how, attempt))
        for run_id, stamps in open_ones.items():
            found += [Invocation(run_id, pid, began, None, None, n) for began, n in stamps]
    return found


def _instants(faults: Mapping[int, int | Sequence[int]], pid: int) -> list[int]:
    at = faults.get(pid, ())
    return sorted([at] if isinstance(at, int) else at)


def intervals(log_dir: Path, faults: Mapping[int, int | Sequence[int]]) -> dict[str, list[Span]]:
    """Each run's passes as (start, end, pid); a pass open at a fault of its process
    (*faults*: pid -> the instant, or instants, of its faults) ends there."""
    spans: dict[str, list[Span]] = defaultdict(list)
    for one in invocations(log_dir):
        cut = [t for t in _instants(faults, one.pid) if t >= one.start]
        if one.end is None:
            assert cut, f"pass of {one.run_id} by {one.pid} never ended and met no fault"
            end = cut[0]
        else:
            end = min([one.end, *cut])
        spans[one.run_id].append((one.start, end, one.pid))
    return spans


def most_at_once(spans: Iterable[Span]) -> int:
    """The most of *spans* open at one instant (an end before a start)."""
    spans = list(spans)
    events = sorted([(b, 1) for b, _, _ in spans] + [(e, -1) for _, e, _ in spans])
    open_now = most = 0
    for _, change in events:
        open_now += change
        most = max(most, open_now)
    return most


def overlaps(spans: Mapping[str, list[Span]]) -> list[tuple[str, Span, Span]]:
    """Pairs of passes of one run that overlap in time."""
    found = []
    for run_id, passes in spans.items():
        ordered = sorted(passes)
        found += [(run_id, a, b) for a, b in itertools.pairwise(ordered) if b[0] < a[1]]
    return found


def assert_never_two_at_once(spans: Mapping[str, list[Span]]) -> None:
    both = overlaps(spans)
    assert both == [], f"two passes of one run at once (run, first, second): {both[:5]}"


def statuses(run_ids: Sequence[str]) -> Counter[str]:
    from django_leasejobs.models import Run

    return Counter(Run.objects.filter(pk__in=run_ids).values_list("status", flat=True))


def settled(run_ids: Sequence[str], seconds: float, live: Sequence[str] = ("running",)) -> bool:
    """Wait up to *seconds* until none of *run_ids* is still live; whether that happened."""
    from django.db import DatabaseError, connection

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if not any(statuses(run_ids)[status] for status in live):
                return True
        except DatabaseError:
            connection.close()  # reopened on the next query
        time.sleep(0.2)  # the poll's interval, under the deadline above
    return False


def assert_no_run_lost(run_ids: Sequence[str], allowed: Iterable[str] = ("done",)) -> Counter:
    """Every run exists and is in one of the *allowed* statuses; the count of each."""
    found = statuses(run_ids)
    assert sum(found.values()) == len(run_ids), f"runs missing: {len(run_ids)} started, {found}"
    stray = {status: n for status, n in found.items() if status not in set(allowed)}
    assert not stray, f"runs lost or stuck: {stray} (allowed: {sorted(allowed)}; all: {found})"
    return found


def assert_only_committed_writes(run_ids: Sequence[str], passes: int, steps: int) -> None:
    """No write of a pass after it lost its lease (L6): what each run holds is exactly what
    its committed passes wrote. Each committed pass of tests/faults/jobs.py's ``walk``
    moves the cursor on by one and adds ``steps`` steps and one pass to the counters;
    the ledger holds only the steps of the pass in flight (none once the run is done),
    all at the current cursor; a done run's result is its last pass's (``None``)."""
    from django_leasejobs.models import Run

    wrong = []
    for run in Run.objects.filter(pk__in=run_ids).prefetch_related("steps"):
        counters = run.decoded_counters().value
        committed = passes if run.status == "done" else (run.decoded_cursor().value or 0)
        expected = {"steps": committed * steps, "passes": committed} if committed else {}
        ledger = sorted(step.name for step in run.steps.all())
        at_cursor = all(name.split(":")[0] == str(committed) for name in ledger)
        if counters != expected or (run.status == "done" and ledger) or not at_cursor:
            wrong.append((run.pk, run.status, counters, expected, ledger))
        if run.status == "done" and run.decoded_result().value is not None:
            wrong.append((run.pk, "result", run.decoded_result().value))
    assert wrong == [], (
        f"writes no committed pass made (run, status, counters, expected, steps): {wrong[:5]}"
    )


def executions() -> dict[tuple[str, str], list[int]]:
    """Every execution of every step body, in order: (run, step) -> the pids that ran it."""
    from tests.models import Effect

    found: dict[tuple[str, str], list[int]] = defaultdict(list)
    for run_id, name, pid in Effect.objects.order_by("pk").values_list("run_id", "name", "pid"):
        found[run_id, name].append(pid)
    return found


def assert_side_effects(
    done: Sequence[str], passes: int, steps: int, faulted: Iterable[int], in_flight: int
) -> int:
    """Every step of each *done* run ran; a step ran twice only when one of its executions
    was by a process that met a fault (*faulted* pids), and no more repeats than the steps
    *in_flight* at the faults (one per pass running then). Returns the duplicates."""
    ran = executions()
    missing = [
        (run_id, f"{p}:{s}")
        for run_id in done
        for p in range(passes)
        for s in range(steps)
        if (run_id, f"{p}:{s}") not in ran
    ]
    assert missing == [], f"steps of done runs that never ran: {missing[:5]}"
    faulted = set(faulted)
    repeated = {key: pids for key, pids in ran.items() if len(pids) > 1}
    # One of the executions is the faulted process's, first or not: a statement sent into
    # a dead network can reach the server after its client gave up (MariaDB's read_timeout
    # closes the socket, and the kernel delivers what it holds once the network heals).
    unexplained = {key: pids for key, pids in repeated.items() if not faulted & set(pids)}
    assert unexplained == {}, (
        f"steps repeated without a fault in flight: {list(unexplained.items())[:5]}"
    )
    duplicates = sum(len(pids) - 1 for pids in repeated.values())
    assert duplicates <= in_flight, (
        f"{duplicates} repeated step executions, but only {in_flight} steps were in flight at "
        f"the faults: {list(repeated.items())[:5]}"
    )
    return duplicates


def open_at(log_dir: Path, pid: int, instant: int) -> list[Invocation]:
    """The invocations of *pid* running at *instant* (the passes in flight at a fault)."""
    return [
        one
        for one in invocations(log_dir)
        if one.pid == pid and one.start <= instant and (one.end is None or one.end > instant)
    ]


def asleep(log_dir: Path, pid: int) -> dict[str, int]:
    """The runs whose pass in *pid* is asleep in a step body (its last line a ``step``
    line, tests/faults/jobs.py): run -> when that sleep began. A process stopped there
    holds no lock and has no statement on the wire."""
    path = log_dir / f"{pid}.log"
    if not path.exists():
        return {}
    last: dict[str, tuple[str, int]] = {}
    for line in path.read_text().splitlines():
        kind, run_id, stamp, *_ = line.split()
        last[run_id] = (kind, int(stamp))
    return {run_id: at for run_id, (kind, at) in last.items() if kind == "step"}
