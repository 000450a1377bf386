"""factory-boy factories for the models."""

from __future__ import annotations

import factory
from django.utils import timezone
from factory.django import DjangoModelFactory

from django_leasejobs.models import Run, Step
from django_leasejobs.querysets import live_key
from django_leasejobs.states import LIVE_STATUSES, RunStatus


class RunFactory(DjangoModelFactory):
    class Meta:
        model = Run

    job = "tests.walk"
    instance = factory.Sequence(lambda n: f"instance-{n}")
    payload = "null"
    status = RunStatus.RUNNING
    counters = "{}"
    started_at = factory.LazyFunction(timezone.now)
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


class StepFactory(DjangoModelFactory):
    class Meta:
        model = Step

    run = factory.SubFactory(RunFactory)
    name = factory.Sequence(lambda n: f"step-{n}")
    result = "null"
    attempts = 1
    recorded_at = factory.LazyFunction(timezone.now)
