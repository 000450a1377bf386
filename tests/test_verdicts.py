"""A pass's verdict: the weightier one wins, whichever of its two threads decides first (L10).

The pass's own thread decides a step's failure, its timeout or an interrupt;
its heartbeat's thread that the lease is lost, or the timeout passed. These
tests prove the record's check-then-set is one step: one races real threads
through the real method, the others stop a thread between its check and its
set, and let the other decide there.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import threading
import time
from datetime import timedelta

import pytest

from django_leasejobs import verdicts
from django_leasejobs.exceptions import StepFailed
from django_leasejobs.policy import Retry
from django_leasejobs.verdicts import PassRecord, Verdict

WAIT = 60  # seconds: the longest any wait below may take before the test fails
DECIDED = [verdict for verdict in Verdict if verdict is not Verdict.OPEN]


class _WatchedLock:
    """A lock that says when a thread finds it held and waits for it."""

    def __init__(self, waited: threading.Event) -> None:
        self._lock = threading.Lock()
        self._waited = waited

    def __enter__(self) -> None:
        if not self._lock.acquire(blocking=False):
            self._waited.set()
            self._lock.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self._lock.release()


class _PausedRecord(PassRecord):
    """A record whose first read of its verdict -- a check -- lets *rival* decide before it goes on.

    The read is taken, then the rival runs on its own thread: it either
    decides at once (a check and a set that are two steps let it in) or
    waits for the record's lock (they are one step). Only then does the
    paused thread go on to its set, with the verdict it read.
    """

    def __init__(self, timeout: timedelta | None, rival: Verdict) -> None:
        self._paused = False
        self._progressed = threading.Event()
        super().__init__(timeout)
        self._lock = _WatchedLock(self._progressed)
        self.rival = threading.Thread(target=self._rival, args=(rival,))
        self.rival_decided: list[Verdict] = []

    @property
    def _verdict(self) -> Verdict:
        read: Verdict = self.__dict__["stored"]
        if not self._paused:
            self._paused = True
            self.rival.start()
            assert self._progressed.wait(WAIT), "the rival neither decided nor waited"
        return read

    @_verdict.setter
    def _verdict(self, verdict: Verdict) -> None:
        self.__dict__["stored"] = verdict

    def _rival(self, verdict: Verdict) -> None:
        try:
            self.rival_decided.append(self.decide(verdict))
        finally:
            self._progressed.set()


@pytest.mark.parametrize(
    ("lighter", "weightier"),
    list(itertools.combinations(DECIDED, 2)),
    ids=lambda verdict: verdict.name.lower(),
)
def test_l10_a_weightier_verdict_decided_between_a_lighters_check_and_set_wins(lighter, weightier):
    """The lighter verdict's thread has read OPEN and not yet written when the weightier
    one is decided (the heartbeat finding the lease gone, say): the lighter one must not
    then overwrite it. Read and write as two steps, it does; as one, the weightier waits."""
    record = _PausedRecord(None, rival=weightier)
    record.decide(lighter)
    record.rival.join(WAIT)
    assert not record.rival.is_alive()
    assert record.rival_decided == [weightier]
    assert record.verdict is weightier


def test_l10_r10_a_lease_lost_while_the_timeout_is_judged_is_not_overwritten_by_it():
    """R10's judgement on the pass's thread (past the deadline: TIMED_OUT) races the
    heartbeat marking the lease lost (L10): the pass is superseded, not failed."""
    record = _PausedRecord(timedelta(seconds=-1), rival=Verdict.LOST)
    record.begin()  # the deadline is already behind: the first judgement decides TIMED_OUT
    assert record.timed_out()  # it stood when it was decided
    record.rival.join(WAIT)
    assert not record.rival.is_alive()
    assert record.conclude() is Verdict.LOST
    assert not record.timed_out()


def _yield_at_every_opcode_of(module: str):
    """A trace function that offers the interpreter to other threads before each opcode of
    *module*'s code: a check and a set that are two steps get other threads between them."""

    def local(frame, event, arg):
        if event == "opcode":
            time.sleep(0)  # releases the GIL: a waiting thread may run here
        return local

    def tracer(frame, event, arg):
        if frame.f_globals.get("__name__") != module:
            return None
        frame.f_trace_opcodes = True
        return local

    return tracer


def test_l10_the_weightiest_verdict_wins_however_the_threads_interleave():
    """Every verdict decided at once, from its own thread, through the real method, round
    after round, each thread offering the others its turn before every opcode of the
    record's code: the weightiest one stands every time, and each caller is told a verdict
    at least as weighty as its own."""
    rounds = 100
    failure = StepFailed("s", 1, Retry(max_attempts=1), "boom")
    gate = threading.Barrier(len(DECIDED) + 1, timeout=WAIT)
    records: list[PassRecord] = []
    told: dict[Verdict, list[Verdict]] = {verdict: [] for verdict in DECIDED}

    def decider(verdict: Verdict) -> None:
        sys.settrace(_yield_at_every_opcode_of(verdicts.__name__))
        step = failure if verdict is Verdict.STEP_FAILED else None
        with contextlib.suppress(threading.BrokenBarrierError):  # a failed round ends them
            for _ in range(rounds):
                gate.wait()  # the round's record is ready
                told[verdict].append(records[-1].decide(verdict, step))
                gate.wait()  # every decider has decided

    threads = [threading.Thread(target=decider, args=(v,)) for v in reversed(DECIDED)]
    try:
        for thread in threads:
            thread.start()
        for _ in range(rounds):
            records.append(PassRecord(None))
            gate.wait()
            gate.wait()
            assert records[-1].verdict is Verdict.LOST
    except BaseException:
        gate.abort()  # a failed round releases the deciders instead of leaving them waiting
        raise
    finally:
        for thread in threads:
            thread.join(WAIT)
    assert all(verdict >= own for own, verdicts in told.items() for verdict in verdicts)
    assert all(len(verdicts) == rounds for verdicts in told.values())


def test_r5_a_step_failure_is_kept_with_its_verdict_and_a_weightier_one_keeps_it():
    """The failure behind STEP_FAILED is recorded with it; a later TIMED_OUT or LOST
    overrides the verdict but never erases the failure, and a lighter verdict changes
    neither."""
    failure = StepFailed("s", 1, Retry(max_attempts=1), "boom")
    record = PassRecord(None)
    assert record.decide(Verdict.STEP_FAILED, failure) is Verdict.STEP_FAILED
    assert record.failed_step is failure
    assert record.decide(Verdict.LOST) is Verdict.LOST
    assert record.decide(Verdict.STEP_FAILED, StepFailed("t", 1, Retry(), "x")) is Verdict.LOST
    assert (record.verdict, record.failed_step) == (Verdict.LOST, failure)
