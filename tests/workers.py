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
