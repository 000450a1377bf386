"""The label that names a job in every family, the view's and a worker's (O2, revision 4)."""

from __future__ import annotations

__all__ = ["JOB_LABEL"]

#: Never ``job``: Prometheus gives every sample its own ``job`` (and ``instance``)
#: target label and renames a metric's ``job`` to ``exported_job``, which silently
#: splits every per-job query. Not ``instance`` either, for the same reason.
JOB_LABEL = "job_name"
