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
