"""A task pass's call, resolved once from its claimed run (SPEC §9, §13; ``tasks/calls.py``).

The envelope is read and the task imported where the pass is admitted, and
``task_started``'s result is built from the claimed row and the run's
attempts: the pass reads no row of the run again to report that it started.
The tests that count drive one pass with ``drive_run``, so what they count
is that pass alone (the ``task_finished`` it leads to is sent at commit,
after it).
"""

from __future__ import annotations

import json
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils.module_loading import import_string

from django_leasejobs import PassOutcome, RunStatus, compat
from django_leasejobs.due import DriveOptions, DueKey, Turn
from django_leasejobs.execute import drive_run
from django_leasejobs.models import Run, TaskAttempt
from django_leasejobs.registry import registry
from django_leasejobs.tasks import TASK_JOB, envelope
from django_leasejobs.tasks.envelope import Envelope
from tests import tasks
from tests.task_helpers import AT_ONCE, drive, tasks_with
from tests.utils import statements

pytestmark = pytest.mark.django_db

#: The runs table named in a statement -- not the attempts table, nor the steps'.
RUN_TABLE = re.compile(r"""["`]leasejobs_run["`]""")


def one_pass(result):
    """Drive one pass of *result*'s run, on this connection; its outcome."""
    spec = registry.get(TASK_JOB)
    options = DriveOptions("default", {spec.name: spec}, max_passes=1, stop=lambda: False)
    (outcome,) = drive_run(Turn(DueKey(result.id, spec.name, took_over=False), spec), options)
    return outcome


def test_tasks_s9_s13_task_started_reads_the_attempts_and_never_the_run_again():
    """SPEC §9, §13: a task pass is its claim, BEGIN, its attempt's INSERT and read, its commit.

    The read between BEGIN and ``task_started`` is of the run's attempts
    only: the run itself was read once, by the claim. (Before issue 21 it
    was the run LEFT JOINed to its attempts, read again, and its task
    imported again, to build the same result.)
    """
    enqueued = tasks.add.enqueue(1, 2)
    sent_before_started = []
    with CaptureQueriesContext(connection) as queries:

        def receive(sender, task_result, **kwargs):
            sent_before_started.append(len(statements(queries)))

        compat.task_started.connect(receive, weak=False, dispatch_uid="t-calls-started")
        try:
            outcome = one_pass(enqueued)
        finally:
            compat.task_started.disconnect(dispatch_uid="t-calls-started")
    assert outcome.status == PassOutcome.COMPLETED
    sent = statements(queries)
    (started,) = sent_before_started
    *claim, begin, inserted, read = sent[:started]
    (commit,) = sent[started:]
    # The claim, and its read-back where the backend cannot return the row (MariaDB).
    assert 1 <= len(claim) <= 2, claim
    assert all(RUN_TABLE.search(sql) for sql in (*claim, begin, commit)), sent
    assert "lease_began_at" in begin
    assert inserted.startswith("INSERT INTO"), inserted
    assert "leasejobs_taskattempt" in inserted
    assert read.startswith("SELECT"), read
    assert "leasejobs_taskattempt" in read
    assert not RUN_TABLE.search(read), read


def test_tasks_s9_a_pass_reads_its_call_once_and_imports_its_task_once(monkeypatch):
    """SPEC §9: the envelope read once (it was three times), the task imported once (twice)."""
    enqueued = tasks.add.enqueue(1, 2)
    reads, imports = [], []
    read = Envelope.read.__func__

    def counted_read(cls, payload):
        reads.append(payload)
        return read(cls, payload)

    def counted_import(path):
        imports.append(path)
        return import_string(path)

    monkeypatch.setattr(Envelope, "read", classmethod(counted_read))
    monkeypatch.setattr(envelope, "import_string", counted_import)
    assert one_pass(enqueued).status == PassOutcome.COMPLETED
    assert len(reads) == 1
    assert imports == ["tests.tasks.add"]
    assert tasks.add.get_result(enqueued.id).return_value == 3


def test_tasks_s9_task_started_result_is_what_a_read_of_the_run_says_mid_pass():
    """SPEC §9: the result built from the claimed row equals ``get_result()`` read mid-pass.

    On a second attempt, so that it has an earlier attempt's worker id and
    error to carry, and a first BEGIN that is not its own.
    """
    with tasks_with({"RETRY": {"max_attempts": 2, **AT_ONCE}}):
        enqueued = tasks.compares_its_context.enqueue()
        assert drive().retrying == 1
        assert drive().completed == 1
        result = tasks.compares_its_context.get_result(enqueued.id)
    assert result.attempts == 2
    assert result.return_value == []  # no field of the context's result differs


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"task": 5}, "the run's payload is not a task call"),
        ({"run_after": "2026-01-01T00:00:00"}, "the run's payload holds a naive run_after"),
    ],
)
def test_tasks_s9_r9_a_payload_that_holds_no_task_call_fails_its_run_with_why_and_no_attempt(
    change, reason
):
    """SPEC §9, R9: nothing to call, so no attempt; ``last_error`` says what the payload lacks."""
    enqueued = tasks.add.enqueue(1, 1)
    run = Run.objects.get(pk=enqueued.id)
    Run.objects.filter(pk=run.pk).update(payload=json.dumps({**json.loads(run.payload), **change}))
    assert drive().failed == 1
    failed = Run.objects.get(pk=run.pk)
    assert (failed.status, failed.failure_code) == (RunStatus.FAILED, "handler_failed")
    assert failed.last_error == f"ValueError: {reason}"
    assert not TaskAttempt.objects.filter(run_id=run.pk).exists()
