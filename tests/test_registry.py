"""The @job decorator and registry: every option validated at registration (SPEC §3, §11)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from datetime import timedelta

import pytest

from django_leasejobs import DuplicateJob, InvalidJob, Job, Retry, job, registry
from django_leasejobs.registry import get_job


@pytest.fixture
def scratch():
    """Unregister whatever a test registers under ``scratch.*``."""
    yield
    for name in [n for n in registry.names() if n.startswith("scratch")]:
        registry.unregister(name)


def handler(p):
    return None


def test_job_registers_with_every_option(scratch):
    spec = job(
        "scratch.full",
        lease=timedelta(minutes=2),
        retry=Retry(max_attempts=4, base=timedelta(seconds=2), cap=timedelta(minutes=1)),
        timeout=timedelta(minutes=10),
        schedule="0 3 * * *",
        timezone="Europe/Paris",
        missed="required",
        safe_to_repeat=False,
        stall_after=timedelta(hours=1),
    )(handler)
    assert isinstance(spec, Job)
    assert get_job("scratch.full") is spec
    assert spec.lease == timedelta(minutes=2)
    assert spec.retry.max_attempts == 4
    assert spec.schedule == "0 3 * * *"
    assert spec.timezone == "Europe/Paris"
    assert spec.missed == "required"
    assert spec.safe_to_repeat is False
    assert spec("p") is None  # a Job calls its handler


def test_job_defaults(scratch):
    spec = job("scratch.defaults")(handler)
    assert spec.lease is None
    assert spec.effective_lease == timedelta(minutes=5)
    assert spec.retry == Retry()
    assert spec.timeout is None
    assert spec.schedule is None
    assert spec.safe_to_repeat is True


def test_bare_decorator_names_the_job_after_the_function(scratch):
    @job
    def scratch_bare(p):
        return None

    assert get_job("scratch_bare") is scratch_bare
    registry.unregister("scratch_bare")


def test_effective_lease_follows_settings(scratch, settings):
    spec = job("scratch.lease")(handler)
    settings.LEASEJOBS = {"LEASE": timedelta(seconds=42)}
    assert spec.effective_lease == timedelta(seconds=42)


BAD_OPTIONS = [
    pytest.param({"lease": timedelta(milliseconds=99)}, "lease", id="lease-under-100ms"),
    pytest.param({"lease": 30}, "lease", id="lease-not-timedelta"),
    pytest.param({"retry": Retry(max_attempts=0)}, "max_attempts", id="retry-below-1"),
    pytest.param({"retry": Retry(base=timedelta(minutes=10))}, "cap", id="retry-cap-below-base"),
    pytest.param({"retry": Retry(jitter=2)}, "jitter", id="retry-jitter"),
    pytest.param({"retry": 3}, "retry", id="retry-not-policy"),
    pytest.param({"timeout": timedelta(0)}, "timeout", id="timeout-zero"),
    pytest.param({"schedule": "61 * * * *"}, "cron", id="bad-cron"),
    pytest.param({"schedule": "every day"}, "cron", id="cron-words"),
    pytest.param({"schedule": "0 3 * * *", "timezone": "Mars/Olympus"}, "timezone", id="bad-tz"),
    pytest.param({"timezone": "Europe/Paris"}, "schedule", id="tz-without-schedule"),
    pytest.param({"schedule": "0 3 * * *", "missed": "sometimes"}, "missed", id="bad-missed"),
    pytest.param({"missed": "skip"}, "schedule", id="missed-without-schedule"),
    pytest.param({"safe_to_repeat": "yes"}, "safe_to_repeat", id="safe-not-bool"),
    pytest.param({"stall_after": timedelta(0)}, "stall_after", id="stall-zero"),
    pytest.param({"schedule": "0 0 30 2 *"}, "never comes round", id="cron-never"),
    pytest.param({"lease": timedelta.max}, "lease", id="lease-past-9999"),
    pytest.param({"timeout": timedelta(days=10**6)}, "timeout", id="timeout-past-9999"),
    pytest.param(
        {"retry": Retry(cap=timedelta(days=10**6), base=timedelta(days=1))},
        "retry cap must be at most 3653 days",
        id="retry-past-9999",
    ),
]


@pytest.mark.parametrize(("options", "mention"), BAD_OPTIONS)
def test_invalid_option_is_refused_naming_the_job(scratch, options, mention):
    with pytest.raises(InvalidJob) as caught:
        job("scratch.bad", **options)(handler)
    assert "'scratch.bad'" in str(caught.value)
    assert mention in str(caught.value)
    assert "scratch.bad" not in registry


@pytest.mark.parametrize("name", ["", "has space", "pipe|name", "x" * 101, 12, "x\n"])
def test_invalid_name_is_refused(scratch, name):
    with pytest.raises(InvalidJob, match="name"):
        job(name)(handler)


def test_s11_an_async_handler_is_refused_until_async_is_supported(scratch):
    async def handler(p):
        return p.done()

    with pytest.raises(InvalidJob, match=r"'scratch\.async'.*async function"):
        job("scratch.async")(handler)


class _AsyncCallable:
    async def __call__(self, p):
        return p.done()


async def _async_handler(p, extra=None):
    return p.done()


async def _async_generator(p):
    yield p


@pytest.mark.parametrize(
    "handler",
    [_AsyncCallable(), functools.partial(_async_handler, extra=1), _async_generator],
    ids=["async-call-method", "partial-of-async", "async-generator"],
)
def test_s11_s15_every_async_callable_is_refused_naming_async_to_sync(scratch, handler):
    """§11, §15 (revision 3): passes run on the worker's threads (W5), synchronously."""
    with pytest.raises(InvalidJob, match=r"'scratch\.async2'.*async_to_sync"):
        job("scratch.async2")(handler)


def test_duplicate_name_from_another_function_is_refused(scratch):
    job("scratch.dup")(handler)

    def other(p):
        return None

    with pytest.raises(DuplicateJob) as caught:
        job("scratch.dup")(other)
    assert "scratch.dup" in str(caught.value)
    assert "registered twice" in str(caught.value)
    assert get_job("scratch.dup").handler is handler


def test_reregistering_the_same_function_replaces_it(scratch):
    first = job("scratch.same")(handler)
    second = job("scratch.same", lease=timedelta(seconds=1))(handler)
    assert get_job("scratch.same") is second
    assert first is not second


def test_tests_jobs_module_was_autodiscovered():
    assert {"tests.noop", "tests.walk", "tests.nightly", "tests.fragile"} <= set(registry.names())


def test_an_invalid_job_stops_manage_py_check_naming_it():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings_badjob"}
    env.pop("DATABASE_URL", None)
    completed = subprocess.run(
        [sys.executable, "-m", "django", "check"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode != 0
    assert "InvalidJob" in completed.stderr
    assert "'tests.bad_lease'" in completed.stderr
    assert "at least 100 ms" in completed.stderr


def test_an_unknown_option_is_refused_naming_the_job(scratch):
    with pytest.raises(InvalidJob, match=r"'scratch\.typo'.*unknown option 'leese'"):
        job("scratch.typo", leese=timedelta(minutes=1))(handler)  # type: ignore[call-overload]
    assert "scratch.typo" not in registry
