"""A held run's step in flight, as the admin says it (SPEC A8).

A job not safe to repeat records each step as begun before it runs it, so a
held run's ledger names the step its pass stopped in -- the one that may have
half-happened (a card charged, a mail sent) -- with when it began
(:mod:`django_leasejobs.in_flight`). The run page says it in its held banner
and summary, the run list in a held run's "next due", and the "Release:
resume" confirmation says which step runs again. A pass that stopped before
any step, or between two, says that instead.

Read once per page: :func:`in_flight_for` for one run, :func:`mark_in_flight`
for a page of the list (one read for all its held runs).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

from django_leasejobs.in_flight import InFlight, in_flight_of
from django_leasejobs.models import Run
from django_leasejobs.states import RunStatus

from .reading import unreadable
from .times import db_now, moment_tag, time_tag

__all__ = [
    "in_flight_banner",
    "in_flight_for",
    "in_flight_line",
    "in_flight_summary",
    "mark_in_flight",
    "runs_again",
]

#: How a time is written: exact (the run page), or relative with the exact in its title (lists).
Tag = Callable[[datetime | None, datetime], SafeString | str]

#: Where a held run carries its step in flight, once read.
IN_FLIGHT = "_leasejobs_in_flight"


def in_flight_for(run: Run) -> InFlight | None:
    """*run*'s step in flight if it is held (read once, kept on the run), else ``None``."""
    if run.status != RunStatus.HELD or unreadable(run) is not None:
        return None
    cache = vars(run)
    if IN_FLIGHT not in cache:
        cache[IN_FLIGHT] = in_flight_of([run.pk], using=run._state.db)[run.pk]
    found: InFlight = cache[IN_FLIGHT]
    return found


def mark_in_flight(runs: list[Run]) -> None:
    """Give each held run of *runs* its step in flight, in one read for the page (or none)."""
    held = [run for run in runs if run.status == RunStatus.HELD and unreadable(run) is None]
    if held:
        found = in_flight_of([run.pk for run in held], using=held[0]._state.db)
        for run in held:
            vars(run)[IN_FLIGHT] = found[run.pk]


def in_flight_summary(run: Run) -> SafeString | str:
    """The summary's "In flight" line: ``step charge:102, begun 2026-… UTC (4 min ago)``."""
    return _held_said(run, _("step {}, begun {}"), _no_step)


def in_flight_banner(run: Run) -> SafeString | str:
    """The held run's banner: what its pass stopped in, and what to do about it."""
    in_step = _(
        "Held: its pass stopped while step {} was in flight; the step began {}. It may "
        "have half-happened: check it before you decide. Release: resume runs it again; "
        "Release: fail leaves it as it is."
    )
    resume = _("Held: {}. Release: resume runs the pass again from the same cursor.")
    return _held_said(run, in_step, lambda found: format_html(resume, _no_step(found)))


def in_flight_line(run: Run) -> SafeString | str:
    """A held run's line in the run list: ``step charge:102 in flight, begun 4 min ago``.

    Only as :func:`mark_in_flight` read it for the page: never a read per row.
    """
    found = vars(run).get(IN_FLIGHT)
    if not isinstance(found, InFlight):
        return ""
    if found.step:
        return _step(_("step {} in flight, begun {}"), found, run, when=time_tag)
    return _no_step(found)


def runs_again(run: Run) -> SafeString | str:
    """What "Release: resume" runs again, named: the step in flight, or the pass from its step."""
    in_step = _(
        "Step {} runs again: it was in flight when the pass stopped, begun {}, and may "
        "have half-happened."
    )
    return _held_said(run, in_step, _no_step_again)


def _held_said(
    run: Run, in_step: str, no_step: Callable[[InFlight], SafeString]
) -> SafeString | str:
    """Every sentence about a held run has two forms, as its pass stopped in a step or outside
    one (*no_step*); a run that is not held gets none."""
    found = in_flight_for(run)
    if found is None:
        return ""
    return _step(in_step, found, run) if found.step else no_step(found)


def _no_step_again(found: InFlight) -> SafeString:
    if found.last_completed is not None:
        said = _(
            "No step was in flight: the pass stopped after step {} completed, which returns "
            "its recorded result; the steps after it run."
        )
        return format_html(said, _code(found.last_completed))
    return format_html("{}", _("No step had begun when the pass stopped: it runs from its start."))


def _step(said: str, found: InFlight, run: Run, when: Tag = moment_tag) -> SafeString:
    """*said* with the step in flight's name and when it began (on the database's clock)."""
    assert found.step is not None
    return format_html(said, _code(found.step), when(found.began_at, db_now(run)))


def _no_step(found: InFlight) -> SafeString:
    if found.last_completed is not None:
        return format_html(
            _("no step in flight: the pass stopped after step {} completed"),
            _code(found.last_completed),
        )
    return format_html("{}", _("no step had begun when the pass stopped"))


def _code(name: str) -> SafeString:
    return format_html("<code>{}</code>", name)
