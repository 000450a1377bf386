"""The backfill how-to's code runs as written (docs/howto/backfills.md, SPEC §3 ``p.walk``).

The page's blocks -- the job, its start, the queue's pause and resume -- are
read from the page and run here against ``tests.models.Contact``, standing in
for the page's ``contacts.models.Contact``: 2 500 messy addresses, walked a
thousand a pass under the job's rate limit, paused after the first batch and
resumed, until every address is stored lower-case and trimmed.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from django_leasejobs import RunStatus, registry, run_due_jobs
from django_leasejobs.models import Run
from tests.models import Contact
from tests.utils import fresh, wait_for

pytestmark = pytest.mark.django_db

HOWTO = Path(__file__).resolve().parents[1] / "docs" / "howto" / "backfills.md"
JOB = "normalise_emails"


def _between(marker: str) -> str:
    """The fenced block between ``<!-- marker -->`` and ``<!-- /marker -->`` in the how-to."""
    text = HOWTO.read_text()
    block = text.split(f"<!-- {marker} -->", 1)[1].split(f"<!-- /{marker} -->", 1)[0]
    lines = block.strip().splitlines()
    assert lines[0] == "```python", lines[0]
    assert lines[-1] == "```", lines[-1]
    return "\n".join(lines[1:-1])


def _run(code: str, name: str) -> dict:
    """Run *code* as the module *name*; its namespace."""
    module = types.ModuleType(name)
    exec(compile(code, f"{HOWTO.name}:{name}", "exec"), module.__dict__)
    return module.__dict__


@pytest.fixture
def contacts_app(monkeypatch):
    """``contacts.models.Contact`` as the page imports it: the tests' own contacts table."""
    package = types.ModuleType("contacts")
    models = types.ModuleType("contacts.models")
    models.Contact = Contact
    package.models = models
    monkeypatch.setitem(sys.modules, "contacts", package)
    monkeypatch.setitem(sys.modules, "contacts.models", models)
    yield
    registry.unregister(JOB)


def _messy(n: int) -> str:
    return [f" User{n}@Example.COM", f"user{n}@example.com", f"USER{n}@EXAMPLE.ORG  "][n % 3]


def test_s3_the_backfill_howto_walks_pauses_resumes_and_fixes_every_row(contacts_app):
    Contact.objects.bulk_create([Contact(pk=n, email=_messy(n)) for n in range(1, 2501)])
    jobs = _run(_between("backfill-job"), "contacts.jobs")
    assert jobs["backfill_emails"].name == JOB

    _run(_between("backfill-start"), "shell")
    (run,) = Run.objects.filter(job=JOB)
    assert run_due_jobs(jobs=[JOB]).advanced == 1
    first = fresh(run)
    assert first.progress_total == 2500  # total=True: the admin's progress bar
    assert json.loads(first.counters) == {"walked": 1000}
    assert json.loads(first.cursor) == 1000

    pause, resume = _between("backfill-pause").split("\n...\n")
    imports = pause.split("\n\n", 1)[0]
    _run(pause, "pause")
    assert run_due_jobs(jobs=[JOB]).attempted == 0  # paused: no pass begins
    assert fresh(run).cursor == first.cursor

    _run(f"{imports}\n\n{resume}", "resume")

    def walked_to_the_end():
        report = run_due_jobs(jobs=[JOB])  # throttled by the job's Rate until it allows a begin
        assert not report.errors, report.errors
        return fresh(run).status == RunStatus.DONE

    wait_for(walked_to_the_end, "the backfill to finish")
    done = fresh(run)
    assert json.loads(done.counters) == {"walked": 2500}
    emails = list(Contact.objects.order_by("pk").values_list("email", flat=True))
    assert emails == [_messy(n).strip().lower() for n in range(1, 2501)]
