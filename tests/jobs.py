"""Module-level jobs the tests drive (autodiscovered: ``tests`` is an installed app)."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import timedelta

from django_leasejobs import Limit, Rate, Retry, job
from tests.faults import stall_jobs as _stall_jobs  # noqa: F401 - F10, F11, F13's jobs
from tests.faults import work as _f678_jobs  # noqa: F401  (F6-F8's jobs, tests.f678.*)


@contextmanager
def _interval_logged(p):
    """Log the pass's interval as a ``PassLog`` row (who ran when: the overlap tests).

    The row is written before the body and closed after it, whatever happens to
    the pass (``finally``), each in the pass's own autocommit statement: a pass
    that ran and was then superseded still shows up if it overlapped another.
    """
    import os
    import time

    from tests.models import PassLog

    log = PassLog.objects.create(
        run_id=p.run.id, pid=os.getpid(), started_ns=time.monotonic_ns(), ended_ns=0
    )
    try:
        yield
    finally:
        PassLog.objects.filter(pk=log.pk).update(ended_ns=time.monotonic_ns())


@job("tests.noop")
def noop(p):
    return p.done()


@job("tests.walk", lease=timedelta(seconds=30), retry=Retry(max_attempts=3))
def walk(p):
    return p.done()


@job("tests.nightly", schedule="0 3 * * *", timezone="Europe/Paris", missed="catch_up_once")
def nightly(p):
    return p.done()


@job("tests.fragile", safe_to_repeat=False)
def fragile(p):
    return p.done()


@job("tests.counted_walk", lease=timedelta(seconds=60))
def counted_walk(p):
    """Walk ``payload["passes"]`` passes of ``payload["steps"]`` steps, logging each
    invocation's interval (overlap test) and counting every step body execution.

    The interval is logged whatever happens to the pass (``finally``), so a pass
    that ran and was then superseded still shows up if it overlapped another.
    """
    import os

    from tests.models import Effect

    def effect(name):
        _held(p, p.payload.get("sleep", 0))  # a step that takes a moment, like real work
        Effect.objects.create(run_id=p.run.id, name=name, pid=os.getpid())

    with _interval_logged(p):
        position = p.cursor or 0
        for index in range(p.payload.get("steps", 1)):
            name = f"step:{position}:{index}"
            p.step(name, lambda name=name: effect(name))
            p.count("steps")
        p.count("passes")
        return p.done() if position + 1 >= p.payload["passes"] else p.advance(position + 1)


@job("tests.killed_between_steps", lease=timedelta(seconds=1), retry=Retry(max_attempts=5))
def killed_between_steps(p):
    """Step one records an effect; on the first attempt step two hangs until the
    test SIGKILLs the worker. The takeover's replay must not run step one again."""
    import os
    import time

    from tests.models import Effect

    def effect(name):
        Effect.objects.create(run_id=p.run.id, name=name, pid=os.getpid())

    p.step("one", lambda: effect("one"))
    p.step("two", lambda: time.sleep(600) if p.attempt == 1 else effect(f"two@{p.attempt}"))
    return p.done()


def _held(p, seconds):
    """Take *seconds*, or less: until the gate the payload names opens (the test's event).

    ``payload["until_file"]``: until that file exists (the test creates it once
    it has done what it must do while the pass is in flight).
    ``payload["until_done"]``: until no run of this job whose instance starts
    with that prefix is still running (the runs a test says must not wait
    behind this pass). A pass of a handler that sleeps a fixed time lasts
    "long enough" only on an idle machine; one held by a gate lasts exactly as
    long as the test needs, and *seconds* only bounds a hang.
    """
    import os
    import time

    from django_leasejobs.models import Run

    payload = p.payload or {}
    path, prefix = payload.get("until_file"), payload.get("until_done")
    if path is None and prefix is None:
        time.sleep(seconds)
        return
    waiting = Run.objects.filter(job=p.run.job, instance__startswith=prefix or "", status="running")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if os.path.exists(path) if path is not None else not waiting.exists():
            return
        time.sleep(0.05)


@job("tests.sleepy", lease=timedelta(seconds=30))
def sleepy(p):
    """Record that the pass started, then take ``payload["seconds"]`` to finish it (or
    less: see :func:`_held`)."""
    import os

    from tests.models import Effect

    Effect.objects.create(run_id=p.run.id, name="started", pid=os.getpid())
    _held(p, p.payload["seconds"])
    return p.done()


@job("tests.stepwise", lease=timedelta(seconds=30))
def stepwise(p):
    """``payload["steps"]`` steps of ``payload["step_seconds"]`` each; records when it starts."""
    import os
    import time

    from tests.models import Effect

    Effect.objects.create(run_id=p.run.id, name="started", pid=os.getpid())
    for index in range(p.payload["steps"]):
        p.step(f"s{index}", lambda: time.sleep(p.payload["step_seconds"]))
    return p.done()


@job(
    "tests.unrepeatable",
    lease=timedelta(seconds=1),
    retry=Retry(max_attempts=5),
    safe_to_repeat=False,
)
def unrepeatable(p):
    """Like ``tests.killed_between_steps``, for a job that must not be replayed unattended."""
    import os
    import time

    from tests.models import Effect

    def effect(name):
        Effect.objects.create(run_id=p.run.id, name=name, pid=os.getpid())

    effect(f"invoked@{p.attempt}")
    if (p.payload or {}).get("hang") == "before_first_step" and p.attempt == 1:
        time.sleep(600)  # killed here by tests/test_in_flight.py: no step had begun
    p.step("one", lambda: effect("one"))
    p.step("two", lambda: time.sleep(600) if p.attempt == 1 else effect(f"two@{p.attempt}"))
    return p.done()


@job(
    "tests.chaos_walk",
    lease=timedelta(seconds=3),
    retry=Retry(max_attempts=100, base=timedelta(milliseconds=200), cap=timedelta(seconds=2)),
)
def chaos_walk(p):
    """The chaos test's job: ``passes`` passes of ``steps`` steps, each appending a side effect.

    Every invocation logs its start and end to a file of its own process
    (``LEASEJOBS_CHAOS_DIR``), not to the database, so a database restart
    cannot lose the evidence of when a pass ran; a SIGKILLed pass has no end
    line, and the test uses the time of the kill.
    """
    import os
    import time

    from tests.models import Effect

    log_path = os.path.join(os.environ["LEASEJOBS_CHAOS_DIR"], f"{os.getpid()}.log")
    with open(log_path, "a") as log:
        log.write(f"start {p.run.id} {time.monotonic_ns()}\n")
    try:
        position = p.cursor or 0
        for index in range(p.payload["steps"]):
            name = f"{position}:{index}"

            def work(name=name):
                time.sleep(p.payload["step_seconds"])
                Effect.objects.create(run_id=p.run.id, name=name, pid=os.getpid())

            p.step(name, work)
            p.count("steps")
        p.count("passes")
        return p.done() if position + 1 >= p.payload["passes"] else p.advance(position + 1)
    finally:
        with open(log_path, "a") as log:
            log.write(f"end {p.run.id} {time.monotonic_ns()}\n")


@job("tests.chaos_cron", schedule="* * * * *", timezone="UTC", missed="catch_up_once")
def chaos_cron(p):
    """A minutely schedule the chaos workers drive beside their runs; its row is nudged
    off the cron grid mid-run (D6)."""
    return p.done()


def _marked_sleep(p):
    """Note this pass's attempt in the payload's file, then sleep with no step boundary.

    With ``payload["until_attempt"]``, the first attempt hangs only until that
    attempt has noted itself (a takeover began), ``payload["sleep"]`` at most.
    """
    import time

    with open(p.payload["marks"], "a") as marks:
        marks.write(f"{p.attempt}\n")
    if p.attempt == 1:
        until = p.payload.get("until_attempt")
        deadline = time.monotonic() + p.payload["sleep"]
        while until is not None and time.monotonic() < deadline:
            with open(p.payload["marks"]) as marks:
                if len(marks.read().split()) >= until:
                    return p.done()
            time.sleep(0.05)
        time.sleep(max(0.0, deadline - time.monotonic()))
    return p.done()


#: L10: leases of 0.6 s, renewed by the heartbeat every 0.2 s while a pass sleeps.
BEATING = {"lease": timedelta(milliseconds=600), "heartbeat": True}

job("tests.heartbeat", **BEATING)(_marked_sleep)
job("tests.heartbeat.timeout", **BEATING, timeout=timedelta(milliseconds=500))(_marked_sleep)


def _logged_sleep(p):
    """Log this pass's interval (who ran when: the overlap tests), sleeping ``payload["sleep"]``.

    The log row is written before the sleep and closed after it, in the
    pass's own autocommit statements, so a test reads how many passes of a
    limited job overlapped (§14). A payload gate (:func:`_held`) may end the sleep early.
    With ``payload["stamp_begin"]`` the pass's BEGIN is noted too, as the database
    stamped it (``Begun``): what a rate spaces, whatever the handler's own delay.
    """
    if (p.payload or {}).get("stamp_begin"):
        from django_leasejobs.models import Run
        from tests.models import Begun

        began = Run.objects.filter(pk=p.run.id).values_list("lease_began_at", flat=True).get()
        Begun.objects.create(run_id=p.run.id, began_at=began)
    with _interval_logged(p):
        _held(p, (p.payload or {}).get("sleep", 0.05))
    return p.done()


def _account(payload):
    return payload["account"]


def _two_at_once(name, lease):
    """Jobs of logged sleeps on *lease*: *name*, two passes at once (C2), and
    ``<name>.keyed``, two at once per ``payload["account"]`` (C1)."""
    job(name, lease=lease, limit=Limit(concurrency=2))(_logged_sleep)
    job(f"{name}.keyed", lease=lease, limit=Limit(concurrency=2, key=_account))(_logged_sleep)


# §14 flow control: two passes at once; two per account; five begins per 2 s.
_two_at_once("tests.limited", timedelta(seconds=2))
job("tests.rated", lease=timedelta(seconds=5), limit=Limit(rate=Rate(5, per=timedelta(seconds=2))))(
    _logged_sleep
)


def _slot_holder(p):
    """Like ``_logged_sleep``, but a first attempt sleeps ``payload["hold"]``: the pass a
    test SIGKILLs while it holds the job's one slot. Its replay (attempt 2, after the
    takeover) sleeps ``payload["sleep"]`` like the others."""
    import time

    with _interval_logged(p):
        first = p.attempt == 1
        time.sleep(p.payload.get("hold", 0) if first else p.payload.get("sleep", 0.05))
    return p.done()


# C2 + L10: one slot, kept by the heartbeat while the pass lives, freed when it is killed.
job(
    "tests.limited.held",
    lease=timedelta(seconds=2),
    heartbeat=True,
    limit=Limit(concurrency=1),
)(_slot_holder)

# The chaos workload's limited job: chaos_walk's passes (file-logged intervals, a side
# effect per step), at most two at once across the whole fleet (C2).
job(
    "tests.chaos_limited",
    lease=timedelta(seconds=3),
    retry=Retry(max_attempts=100, base=timedelta(milliseconds=200), cap=timedelta(seconds=2)),
    limit=Limit(concurrency=2),
)(chaos_walk.handler)


# The worker-process tests of §14 count overlapping handlers. A pass whose
# lease ran out no longer holds its slot (C2: "begun and unexpired"), so a
# worker stalled past a 2 s lease would be one more that C2 allows; a long
# lease makes the count exactly what C2 promises.
_two_at_once("tests.limited.workers", timedelta(seconds=60))


# W1, W3 (revision 3): a drive that found nothing due rests until the next run falls due.
# A first attempt that fails, retried 200 ms later: the one-shot must wait for it (W3).
def _fails_once(p):
    if p.attempt == 1:
        raise RuntimeError("the first attempt fails")
    return p.done()


job(
    "tests.fails_once",
    retry=Retry(max_attempts=3, base=timedelta(milliseconds=200), jitter=0),
)(_fails_once)


def _rule_from_environment():
    """The rate of ``tests.rated.changing``: ``LEASEJOBS_TEST_RATE`` = "n/seconds" or "none".

    A worker process started with another value is a deploy that changed the
    job's limit in code (C5).
    """
    import os

    text = os.environ.get("LEASEJOBS_TEST_RATE", "5/1")
    if text == "none":
        return None
    n, per = text.split("/")
    return Limit(rate=Rate(int(n), per=timedelta(seconds=float(per))))


job("tests.rated.changing", lease=timedelta(seconds=30), limit=_rule_from_environment())(
    _logged_sleep
)


# §13: runs claimed ahead behind a pass that runs long are given back, for another worker.
job("tests.mostly_quick", lease=timedelta(seconds=30))(_logged_sleep)


# W5: passes on a worker's threads. Unlimited, with a long lease, logged (who ran when).
job("tests.concurrent", lease=timedelta(seconds=60))(_logged_sleep)


# W5 tests: passes on a worker's threads, every rule of the pass holding per pass.


def _w5_flaky(p):
    """``payload["passes"]`` passes, each counting before it may fail: a pass listed in
    ``payload["fail_once"]`` raises on its first attempt, one in ``payload["fail_always"]``
    on every attempt. Each invocation is logged as an ``Effect`` named
    ``"<cursor>@<attempt>"``, so a test reads exactly which attempts ran (R4)."""
    import os
    import time

    from tests.models import Effect

    position = p.cursor or 0
    Effect.objects.create(run_id=p.run.id, name=f"{position}@{p.attempt}", pid=os.getpid())
    p.count("passes")
    p.count("items", by=position + 1)  # counted, then dropped when the pass raises (R4)
    time.sleep(p.payload.get("sleep", 0.05))
    failing = position in p.payload.get("fail_always", []) or (
        position in p.payload.get("fail_once", []) and p.attempt == 1
    )
    if failing:
        raise RuntimeError(f"pass {position} fails on attempt {p.attempt}")
    return p.done() if position + 1 >= p.payload["passes"] else p.advance(position + 1)


# Three attempts, retried 50 ms later (no jitter): a drain waits a moment, not a back-off.
job(
    "tests.w5.flaky",
    lease=timedelta(seconds=60),
    retry=Retry(max_attempts=3, base=timedelta(milliseconds=50), jitter=0),
)(_w5_flaky)

# counted_walk's passes (logged intervals, an Effect per step) on a 2 s lease, for a
# worker SIGKILLed mid-drain: its runs are taken over once L9 sees the process gone.
job(
    "tests.w5.killed",
    lease=timedelta(seconds=2),
    retry=Retry(max_attempts=10, base=timedelta(milliseconds=100), cap=timedelta(seconds=1)),
)(counted_walk.handler)

# C2 across the threads of one process and across processes: one pass at a time. A long
# lease, as for tests.limited.workers above, so the count is exactly what C2 promises.
job("tests.w5.limited_one", lease=timedelta(seconds=60), limit=Limit(concurrency=1))(_logged_sleep)

# L10 on a worker's threads: 0.6 s leases renewed by each pass's own heartbeat.
job("tests.w5.heartbeat", **BEATING)(_logged_sleep)


def _timed_steps(p):
    """``payload["steps"]`` steps of ``payload["step_seconds"]`` each, the interval logged:
    a pass longer than its job's timeout learns at a step boundary (R10)."""
    import time

    with _interval_logged(p):
        for index in range(p.payload["steps"]):
            p.step(f"s{index}", lambda: time.sleep(p.payload["step_seconds"]))
    return p.done()


# R10 per pass: one second for each pass, one attempt, so a timed-out pass fails at once.
job(
    "tests.w5.timed",
    lease=timedelta(seconds=30),
    timeout=timedelta(seconds=1),
    retry=Retry(max_attempts=1),
)(_timed_steps)


@job("tests.paused_walk", lease=timedelta(seconds=30))
def paused_walk(p):
    """W6 (revision 4): one short pass, its BEGIN noted as the database stamped it."""
    import time

    from django_leasejobs.models import Run
    from tests.models import Begun

    began = Run.objects.filter(pk=p.run.id).values_list("lease_began_at", flat=True).get()
    Begun.objects.create(run_id=p.run.id, began_at=began)
    time.sleep(p.payload.get("sleep", 0.02))
    return p.done()


@job("tests.deferring", lease=timedelta(seconds=30))
def deferring(p):
    """O2: a run that says "not now" (R8) until ``payload["until"]`` (epoch seconds) passes."""
    import time

    from django_leasejobs import Defer

    if time.time() < p.payload["until"]:
        raise Defer(timedelta(milliseconds=p.payload.get("every_ms", 200)))
    return p.done()


@job("tests.deferring_slowly", lease=timedelta(seconds=30))
def deferring_slowly(p):
    """W1 + W5: until ``payload["until"]`` (epoch seconds), a pass that takes a second and
    then says "again, at once" (R8): due again as it ends, with no notification (W2)."""
    import time

    from django_leasejobs import Defer

    if time.time() < p.payload["until"]:
        # A fixed wait is the point: the worker must be resting while this pass is in
        # flight, so that only the pass's end can wake it (the test's deadline is 60 s).
        time.sleep(1)
        raise Defer(timedelta(0))
    return p.done()


# O2's monitoring, proven against a real Prometheus (tests/test_monitoring_prometheus.py):
# two jobs that complete, and one whose first pass fails for good.
@job("tests.monitored.alpha")
def monitored_alpha(p):
    return p.done()


@job("tests.monitored.beta")
def monitored_beta(p):
    return p.done()


@job("tests.monitored.broken", retry=Retry(max_attempts=1))
def monitored_broken(p):
    raise RuntimeError("broken on purpose: its first failed pass must alert (O2)")


def _wait_for_gate(payload):
    """Wait, touching no database, until the file ``payload["until_file"]`` exists (60 s at
    most): a pass waiting on a slow upstream, as ``rundueJobs`` on Django's pool must serve
    hundreds of at once on a few connections (§13, tests/test_pooled.py)."""
    import os
    import time

    deadline = time.monotonic() + 60
    while not os.path.exists(payload["until_file"]) and time.monotonic() < deadline:
        time.sleep(0.05)


def _gated(p):
    _wait_for_gate(p.payload)
    return p.done()


job("tests.gated", lease=timedelta(seconds=60))(_gated)


@job("tests.gated_steps", lease=timedelta(seconds=6), heartbeat=True)
def gated_steps(p):
    """:func:`_wait_for_gate` as the function of its second step, after a first one; its lease
    renewed every 2 s from a side thread (L10). Each borrows from the pool and puts back."""
    p.step("first", lambda: 1)
    p.step("wait", lambda: _wait_for_gate(p.payload))
    return p.done()


# The fault tests' jobs (§17) live beside their tests; registered here, where every
# worker process finds the tests app's jobs.
from tests.faults import jobs as _fault_jobs  # noqa: E402, F401


def _touch(batch):
    """``p.walk``'s batch work in the tests: each row's ``touched`` up by one, in one UPDATE."""
    from django.db.models import F

    if batch:
        type(batch[0]).objects.filter(pk__in=[row.pk for row in batch]).update(
            touched=F("touched") + 1
        )


@job("tests.walk_killed", lease=timedelta(seconds=1), retry=Retry(max_attempts=5))
def walk_killed(p):
    """Walk ``tests.Walked`` three rows a pass; the first attempt of the pass whose cursor is
    ``payload["hang_after"]`` hangs after its batch's step is recorded, before the commit,
    until the test SIGKILLs the worker (tests/test_walk.py)."""
    import time

    from tests.models import Walked

    result = p.walk(Walked.objects.all(), _touch, size=3)
    if p.cursor == p.payload["hang_after"] and p.attempt == 1:
        time.sleep(600)  # the point: hung between the step and the commit until SIGKILLed
    return result
