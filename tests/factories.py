"""factory-boy factories for the models: rows as a restore or a hand edit could leave them.

Production code never builds rows this way (the store writes them); tests do,
to set up a state directly -- a held run, a stranded row, a schedule due an
hour ago.
"""

from __future__ import annotations

import factory
from django.utils.timezone import now
from factory.django import DjangoModelFactory

from django_leasejobs.models import Missed, Run, Schedule, Step
from django_leasejobs.querysets import live_key
from django_leasejobs.states import LIVE_STATUSES, MissedAction, MissedCause, RunStatus


class RunFactory(DjangoModelFactory[Run]):
    class Meta:
        model = Run

    job = "tests.walk"
    instance = factory.Sequence(lambda n: f"instance-{n}")
    payload = "null"
    status = RunStatus.RUNNING
    counters = "{}"
    started_at = factory.LazyFunction(now)
    updated_at = factory.LazyAttribute(lambda run: run.started_at)
    next_attempt_at = factory.LazyAttribute(
        lambda run: run.started_at if run.status == RunStatus.RUNNING else None
    )
    ended_at = factory.LazyAttribute(
        lambda run: None if run.status in LIVE_STATUSES else run.started_at
    )
    live_key = factory.LazyAttribute(
        lambda run: live_key(run.job, run.instance) if run.status in LIVE_STATUSES else None
    )


class StepFactory(DjangoModelFactory[Step]):
    class Meta:
        model = Step

    run = factory.SubFactory(RunFactory)
    name = factory.Sequence(lambda n: f"step-{n}")
    result = "null"
    attempts = 1
    recorded_at = factory.LazyFunction(now)


class ScheduleFactory(DjangoModelFactory[Schedule]):
    class Meta:
        model = Schedule

    job = factory.Sequence(lambda n: f"tests.scheduled-{n}")
    expression = "0 * * * *"
    timezone = "UTC"
    next_due_at = factory.LazyFunction(now)
    seen_at = factory.LazyFunction(now)


class MissedFactory(DjangoModelFactory[Missed]):
    class Meta:
        model = Missed

    job = "tests.nightly"
    due_at = factory.LazyFunction(now)
    cause = MissedCause.WORKER_DOWN
    action = MissedAction.SKIPPED
    recorded_at = factory.LazyAttribute(lambda missed: missed.due_at)
