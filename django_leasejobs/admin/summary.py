"""The run page's summary (SPEC A8): what an operator needs first, on the first screen.

Above the full fields, in a few lines: the status and what it means, when
the run is next due and why, the failure code with its meaning and the first
line of the last error (a cancelled run's says who cancelled it), the step
in flight of a held run, and the actions valid for the run as buttons. Each
line is one the page also shows in full further down; the summary only
chooses and shortens, so that on Django 5.2 and 6.1 alike a 1 400 x 1 000
window shows it whole without scrolling.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

from django_leasejobs.models import Run
from django_leasejobs.states import FailureCode, RunStatus

from .held import in_flight_banner, in_flight_summary
from .next_due import next_due_html
from .reading import unreadable

__all__ = ["ERROR_LINE_MAX", "Summary", "first_line", "summary"]

#: The most characters of the last error's first line the summary shows; the page has it all.
ERROR_LINE_MAX = 200


@dataclass(frozen=True)
class Summary:
    """The summary of one run's page, ready for ``admin/leasejobs/run/summary.html``."""

    badge: SafeString | str
    meaning: str
    next_due: SafeString | str
    failure: str = ""
    failure_meaning: str = ""
    error: str = ""
    #: A held run's step in flight, or what its pass had done before it stopped (A8).
    in_flight: SafeString | str = ""
    #: A held run's banner: the step in flight, and what to do about it.
    banner: SafeString | str = ""
    #: The run page's buttons (:meth:`~.run_page.RunPage.page_buttons`).
    actions: list[dict[str, Any]] = field(default_factory=list)


def first_line(text: str, limit: int = ERROR_LINE_MAX) -> str:
    """The first non-empty line of *text*, cut to *limit* characters."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def summary(run: Run, badge: SafeString | str, actions: list[dict[str, Any]]) -> Summary | None:
    """*run*'s summary, or ``None`` for a row that cannot be read (its page says why).

    *badge* is the status as the page's status field shows it, *actions* its buttons.
    """
    if unreadable(run) is not None:
        return None
    status = RunStatus(run.status) if run.status in RunStatus.values else None
    code = FailureCode(run.failure_code) if run.failure_code in FailureCode.values else None
    return Summary(
        badge=badge,
        meaning=status.meaning if status is not None else _("A status outside the vocabulary."),
        next_due=next_due_html(run),
        failure=run.failure_code,
        failure_meaning=code.meaning if code is not None else "",
        error=first_line(run.last_error),
        in_flight=in_flight_summary(run),
        banner=in_flight_banner(run),
        actions=actions,
    )
