"""Module-level jobs the tests drive (autodiscovered: ``tests`` is an installed app)."""

from __future__ import annotations

from datetime import timedelta

from django_leasejobs import Limit, Rate, Retry, job


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
    import time

    from tests.models import Effect, PassLog

    def effect(name):
        time.sleep(p.payload.get("sleep", 0))  # a step that takes a moment, like real work
        Effect.objects.create(run_id=p.run.id, name=name, pid=os.getpid())

    log = PassLog.objects.create(
        run_id=p.run.id, pid=os.getpid(), started_ns=time.monotonic_ns(), ended_ns=0
    )
    try:
        position = p.cursor or 0
        for index in range(p.payload.get("steps", 1)):
            name = f"step:{position}:{index}"
            p.step(name, lambda name=name: effect(name))
            p.count("steps")
        p.count("passes")
        return p.done() if position + 1 >= p.payload["passes"] else p.advance(position + 1)
    finally:
        PassLog.objects.filter(pk=log.pk).update(ended_ns=time.monotonic_ns())


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


@job("tests.sleepy", lease=timedelta(seconds=30))
def sleepy(p):
    """Record that the pass started, then take ``payload["seconds"]`` to finish it."""
    import os
    import time

    from tests.models import Effect

    Effect.objects.create(run_id=p.run.id, name="started", pid=os.getpid())
    time.sleep(p.payload["seconds"])
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
    """Note this pass's attempt in the payload's file, then sleep with no step boundary."""
    import time

    with open(p.payload["marks"], "a") as marks:
        marks.write(f"{p.attempt}\n")
    if p.attempt == 1:
        time.sleep(p.payload["sleep"])
    return p.done()


# L10: leases of 0.6 s, renewed by the heartbeat every 0.2 s while a pass sleeps.
job("tests.heartbeat", lease=timedelta(milliseconds=600), heartbeat=True)(_marked_sleep)
job(
    "tests.heartbeat.timeout",
    lease=timedelta(milliseconds=600),
    heartbeat=True,
    timeout=timedelta(milliseconds=500),
)(_marked_sleep)


def _logged_sleep(p):
    """Log this pass's interval (who ran when: the overlap tests), sleeping ``payload["sleep"]``.

    The log row is written before the sleep and closed after it, in the
    pass's own autocommit statements, so a test reads how many passes of a
    limited job overlapped (§14).
    """
    import os
    import time

    from tests.models import PassLog

    log = PassLog.objects.create(
        run_id=p.run.id, pid=os.getpid(), started_ns=time.monotonic_ns(), ended_ns=0
    )
    try:
        time.sleep((p.payload or {}).get("sleep", 0.05))
    finally:
        PassLog.objects.filter(pk=log.pk).update(ended_ns=time.monotonic_ns())
    return p.done()


def _account(payload):
    return payload["account"]


# §14 flow control: two passes at once; two per account; five begins per 2 s.
job("tests.limited", lease=timedelta(seconds=2), limit=Limit(concurrency=2))(_logged_sleep)
job(
    "tests.limited.keyed",
    lease=timedelta(seconds=2),
    limit=Limit(concurrency=2, key=_account),
)(_logged_sleep)
job("tests.rated", lease=timedelta(seconds=5), limit=Limit(rate=Rate(5, per=timedelta(seconds=2))))(
    _logged_sleep
)


def _slot_holder(p):
    """Like ``_logged_sleep``, but a first attempt sleeps ``payload["hold"]``: the pass a
    test SIGKILLs while it holds the job's one slot. Its replay (attempt 2, after the
    takeover) sleeps ``payload["sleep"]`` like the others."""
    import os
    import time

    from tests.models import PassLog

    log = PassLog.objects.create(
        run_id=p.run.id, pid=os.getpid(), started_ns=time.monotonic_ns(), ended_ns=0
    )
    try:
        first = p.attempt == 1
        time.sleep(p.payload.get("hold", 0) if first else p.payload.get("sleep", 0.05))
    finally:
        PassLog.objects.filter(pk=log.pk).update(ended_ns=time.monotonic_ns())
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
job("tests.limited.workers", lease=timedelta(seconds=60), limit=Limit(concurrency=2))(_logged_sleep)
job(
    "tests.limited.workers.keyed",
    lease=timedelta(seconds=60),
    limit=Limit(concurrency=2, key=_account),
)(_logged_sleep)
