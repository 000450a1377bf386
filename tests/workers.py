"""Functions the concurrency tests run inside worker processes (tests/procs.py)."""

from __future__ import annotations


def start_each(job: str, instances: list[str], payload, again: bool) -> list[tuple[str, str, bool]]:
    """Call start() once per instance, in order; return (instance, run id, joined)."""
    from django_leasejobs import start

    outcomes = []
    for instance in instances:
        result = start(job, payload, instance=instance, again=again)
        outcomes.append((instance, result.run.pk, result.joined))
    return outcomes


def drain(job: str, seconds: float, max_passes: int = 1) -> dict[str, int]:
    """Drive *job* until none of its runs is live (or *seconds* pass); return the totals."""
    import time

    from django_leasejobs import run_due_jobs
    from django_leasejobs.models import Run

    fields = ("attempted", "advanced", "completed", "retrying", "failed", "superseded")
    totals = dict.fromkeys(fields, 0)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        report = run_due_jobs(jobs=[job], limit=10, max_passes=max_passes)
        for name in fields:
            totals[name] += getattr(report, name)
        if report.attempted == 0:
            if not Run.objects.filter(job=job, status="running").exists():
                break
            time.sleep(0.01)
    return totals


def drive_once(jobs: list[str]) -> dict[str, int]:
    """One drive of *jobs*; the report's counts."""
    from django_leasejobs import run_due_jobs

    report = run_due_jobs(jobs=jobs)
    return {"attempted": report.attempted, "completed": report.completed}


def kick_and_drive(job: str, instances: list[str], seconds: float) -> dict[str, list[str]]:
    """Kick *instances* (``start(again=True)``) and drive *job*, over and over, for *seconds*.

    Run in several processes at once, kicks land on runs other processes are
    committing: the two writes that deadlocked on MariaDB before they took
    their locks in one order. Returns what went wrong, by where it surfaced.
    """
    import time

    from django.db import DatabaseError

    from django_leasejobs import run_due_jobs, start

    problems: dict[str, list[str]] = {"start": [], "drive": []}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for instance in instances:
            try:
                start(job, {"i": instance}, instance=instance, again=True)
            except DatabaseError as exc:
                problems["start"].append(repr(exc))
        report = run_due_jobs(jobs=[job], limit=len(instances))
        problems["drive"] += [note.text for note in report.errors]
        if report.aborted:
            problems["drive"].append(f"aborted: {report.aborted}")
    return problems


def deployment(expression: str, seconds: float) -> int:
    """Be one deployment of a rolling deploy: register ``t.rolling`` with *expression*
    and drive it every 0.1 s for *seconds*. Returns how many drives reported errors."""
    import time

    from django_leasejobs import job, run_due_jobs

    job("t.rolling", schedule=expression, timezone="UTC")(lambda p: p.done())
    failures = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        failures += bool(run_due_jobs(jobs=["t.rolling"]).errors)
        time.sleep(0.1)
    return failures
