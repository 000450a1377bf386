"""The operators' admin (SPEC §8, A1-A9).

Operators read runs and schedules here and act on them through
:mod:`django_leasejobs.operators` -- compare-and-set functions (cancel, retry,
release, pause, resume, run now) -- never by editing a field: payload, cursor
and lease are the protocol's (A6). Every action says what happened, including
"already finished", and is recorded in the admin's LogEntry history.

No page answers a 500 for what a row holds or a request asks (A2, SPEC
§11-12): rows the backend cannot read back are listed and shown as
placeholders that say why, a parameter holding a NUL (which PostgreSQL
refuses in text) is an invalid lookup, and an action on a job this process
does not register is refused with a warning.

* :mod:`.runs` -- the run list and page; :mod:`.summary` -- the page's
  summary of what an operator needs first (A8); :mod:`.held` -- a held run's
  step in flight (A8); :mod:`.steps` -- the page's step ledger;
  :mod:`.run_fields` and :mod:`.run_columns` -- their fields and columns;
  :mod:`.next_due` -- when a live run is next due, and why; :mod:`.folds` --
  long values folded; :mod:`.run_actions` and :mod:`.run_page` -- the list's actions and the
  page's buttons (A3, A7); :mod:`.run_deletes` -- deleting finished runs,
  never a live one (A7); :mod:`.start_run` and :mod:`.start_form` -- "Start a
  run", the only way the admin creates one, and its forms (A9);
* :mod:`.tasks` -- what the run pages show of a Django task's run (SPEC §9);
* :mod:`.schedules` and :mod:`.schedule_actions` -- the schedule pages, their
  actions, the missed ledger; :mod:`.times` -- times as ``<time>``
  elements, and the database's "now" (their text is
  :mod:`django_leasejobs.times`', one format in one named zone, A8);
* :mod:`.overview` and :mod:`.charts` -- the operators' overview (O4), and
  :mod:`.queues` -- the paused queues and their pause and resume (W6, O5),
  which also serves the overview's URL;
* :mod:`.common` -- what they share; :mod:`.display` -- how values are shown;
  :mod:`.reading` -- rows that cannot be read back.
"""

from __future__ import annotations

from .queues import PausedQueueAdmin
from .runs import RunAdmin
from .schedules import MissedAdmin, ScheduleAdmin

__all__ = ["MissedAdmin", "PausedQueueAdmin", "RunAdmin", "ScheduleAdmin"]
