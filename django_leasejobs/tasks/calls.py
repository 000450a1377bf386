"""A task pass's call, resolved once from the run it claimed (SPEC §9).

What a pass of a task run needs to know -- the call its payload holds, the
task that call names, the options the task runs under and the class its
signals are sent as -- is all decided by the claimed row, so it is worked
out once, where the pass is admitted (the built-in job's ``per_run``), and
handed whole to the pass: the envelope is read once, the task imported once,
and ``task_started``'s result is built from the row already in hand, as
``enqueue()`` builds its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from django_leasejobs import compat
from django_leasejobs.exceptions import TaskGone

from .aliases import backend_named, sender_of
from .envelope import Envelope
from .options import TaskOptions

if TYPE_CHECKING:
    from django_leasejobs.models import Run

    from .backend import LeaseJobsBackend

__all__ = ["TaskCall"]


@dataclass(frozen=True)
class TaskCall:
    """One pass's call of a task, as the claimed *run* holds it.

    ``task`` is ``None`` when its path no longer imports; ``gone`` then says
    why, and the pass raises it once it has recorded its attempt, so the
    attempt's traceback shows the import's own error as the cause (§11).
    """

    run: Run
    envelope: Envelope
    task: compat.AnyTask | None
    gone: TaskGone | None
    options: TaskOptions
    sender: type[LeaseJobsBackend]

    @classmethod
    def of(cls, run: Run, envelope: Envelope | None = None) -> TaskCall:
        """The call *run* holds (or *envelope*: a scheduled task's), its task and options resolved.

        Raises ``ValueError`` when the run's payload holds no task call.
        """
        if envelope is None:
            envelope = Envelope.read(run.decoded_payload().value)
        task: compat.AnyTask | None
        try:
            task, gone = envelope.bound(run), None
        except TaskGone as exc:
            task, gone = None, exc
        # The backend the task was enqueued on: its OPTIONS, unless the task has its own.
        backend = backend_named(envelope.backend)
        options = backend.task_options if backend is not None else TaskOptions()
        return cls(run, envelope, task, gone, options.for_task(task), sender_of(backend))

    def bound(self) -> compat.AnyTask:
        """The task to call; raises :class:`TaskGone` when its path no longer imports."""
        if self.task is None:
            assert self.gone is not None
            raise self.gone
        return self.task
