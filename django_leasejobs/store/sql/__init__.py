"""The store's statement compiler: the store's one reach into Django's SQL compiler (§13).

The store's verbs are written as ``QuerySet.update()`` and ``bulk_create()``
calls; the few a pass or a drive sends every time are compiled by the ORM
once per shape and bound per call, here. Nothing outside this package sees
the compiled form: the store's modules build a :class:`Statement`,
:class:`Select`, :class:`Insert`, :class:`Unnest`, :class:`Carried`,
:class:`Dropping` or :class:`Paired` and call it.

* :mod:`.slots` -- where a call's values go (``s.owner``, ``s.now``);
* :mod:`.compiled` -- the compiled SQL and :func:`~.compiled.execute`, the
  one place a compiled statement is sent: it binds the clock's time and the
  call's values, picks the cursor (:mod:`.prepared`), and keeps
  ``QuerySet.update()``'s rollback guard;
* :mod:`.statements` -- a compare-and-set ``UPDATE`` (:class:`Statement`)
  and a drive's read (:class:`Select`);
* :mod:`.inserts` -- new runs (:class:`Insert`; on MariaDB
  :func:`insert_ignoring`); :mod:`.unnest` -- a batch of them (:class:`Unnest`);
* :mod:`.carried` -- PostgreSQL: a step's record in its renewal;
* :mod:`.dropping` -- PostgreSQL: a commit and the drop of its step ledger;
* :mod:`.paired` -- PostgreSQL: a finish and the next pass's BEGIN, one statement;
* :mod:`.prepared` -- the cursor that prepares them (``PREPARE``).

Every statement here is the SQL the ORM compiled for the queryset it stands
for -- ``tests/test_compiled.py`` compares the two on every backend -- plus a
``RETURNING`` list (and on PostgreSQL a ``pg_notify()``), except in two
places, each checked by that test against what the ORM writes:

* :class:`Unnest`, ``start_many()``'s batch ``INSERT ... SELECT`` from
  ``unnest()`` (PostgreSQL) or ``json_each()`` (SQLite), which the ORM cannot
  write: the rows it inserts are compared column by column with
  :class:`Insert`'s;
* :class:`Carried`, which splits the text of Django's ``INSERT`` of a new
  step at ``VALUES (`` to make it ``INSERT ... SELECT ... FROM renewed``.

:class:`Paired` only puts two of the ORM's ``UPDATE`` s side by side in one
``WITH`` statement, each as it is; :class:`Dropping` does the same with a
commit's ``UPDATE`` and the ORM's ``DELETE`` of the step ledger, adding only
the condition that the commit won.

The store's one other statement the ORM does not write is outside this
package, as it compiles nothing: the statistics flush (O1,
:mod:`django_leasejobs.store.stats`), an upsert that adds to the counts
already stored.
"""

from __future__ import annotations

from . import prepared
from .carried import Carried
from .compiled import returns_rows
from .dropping import Dropping
from .inserts import Insert, insert_ignoring
from .paired import Paired
from .slots import AS_IS, KEY, Slots
from .statements import Select, Statement
from .unnest import Unnest

__all__ = [
    "AS_IS",
    "KEY",
    "Carried",
    "Dropping",
    "Insert",
    "Paired",
    "Select",
    "Slots",
    "Statement",
    "Unnest",
    "insert_ignoring",
    "prepared",
    "returns_rows",
]
