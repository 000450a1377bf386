"""Runs (SPEC §2); their step ledger is :mod:`.steps`.

Only :mod:`django_leasejobs.store` writes status or lease columns; these
classes describe the tables and decode what they hold.
"""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any, ClassVar

from django.db import models
from django.db.models import DEFERRED
from django.utils.translation import gettext_lazy as _

from django_leasejobs.codec import Decoded, decode
from django_leasejobs.fields import KeyField
from django_leasejobs.ids import ID_LENGTH, new_id
from django_leasejobs.known import JOB_NAME_LENGTH
from django_leasejobs.limits import KEY_LENGTH as LIMIT_KEY_LENGTH
from django_leasejobs.querysets import RunQuerySet
from django_leasejobs.routing import DEFAULT_QUEUE, PRIORITY_MAX, PRIORITY_MIN, QUEUE_LENGTH
from django_leasejobs.states import (
    LIVE_STATUSES,
    FailureCode,
    LeaseState,
    RunOrigin,
    RunStatus,
    Throttle,
)

__all__ = ["INSTANCE_LENGTH", "JOB_NAME_LENGTH", "Run"]

INSTANCE_LENGTH = 200
#: Run columns an outcome sets to the database's time (see ``Run.as_written``).
_DATABASE_TIMED = frozenset({"updated_at", "ended_at", "next_attempt_at"})


class Run(models.Model):
    """One durable run of a job: what an operator reads afterwards."""

    id = models.CharField(
        _("id"), primary_key=True, max_length=ID_LENGTH, default=new_id, editable=False
    )
    job = KeyField(_("job"), max_length=JOB_NAME_LENGTH)
    instance = KeyField(_("instance"), max_length=INSTANCE_LENGTH, default="default")
    origin = models.CharField(
        _("origin"),
        max_length=max(len(value) for value in RunOrigin.values),
        choices=RunOrigin.choices,
        default=RunOrigin.API,
        help_text=_("How the run began."),
    )
    payload = models.TextField(_("payload (JSON)"), default="null")
    status = models.CharField(
        _("status"),
        max_length=max(len(value) for value in RunStatus.values),
        choices=RunStatus.choices,
        default=RunStatus.RUNNING,
    )
    cursor = models.TextField(
        _("cursor (JSON)"),
        null=True,
        blank=True,
        help_text=_("Where the next pass resumes; empty until a pass commits."),
    )
    counters = models.TextField(_("counters (JSON)"), default="{}")
    attempts = models.PositiveIntegerField(
        _("attempts"), default=0, help_text=_("Consecutive failed passes.")
    )
    failure_code = models.CharField(
        _("failure code"),
        max_length=max(len(value) for value in FailureCode.values),
        choices=FailureCode.choices,
        blank=True,
        default="",
    )
    last_error = models.TextField(_("last error"), blank=True, default="")
    started_at = models.DateTimeField(_("started at"))
    updated_at = models.DateTimeField(_("updated at"))
    next_attempt_at = models.DateTimeField(
        _("next attempt at"),
        null=True,
        blank=True,
        help_text=_("When the run is next due; while leased, when the lease expires."),
    )
    ended_at = models.DateTimeField(_("ended at"), null=True, blank=True)
    lease_owner = models.CharField(_("lease owner"), max_length=ID_LENGTH, null=True, blank=True)
    lease_began_at = models.DateTimeField(_("lease began at"), null=True, blank=True)
    lease_holder = models.CharField(
        _("lease holder"),
        max_length=255,
        blank=True,
        default="",
        help_text=_("The process that claimed the run: host, pid and process start time."),
    )
    admission_misses = models.PositiveIntegerField(_("admission misses"), null=True, blank=True)
    rerun_requested = models.BooleanField(
        _("rerun requested"),
        default=False,
        help_text=_("Start one more run with the latest payload when this one completes."),
    )
    rerun_payload = models.TextField(_("rerun payload (JSON)"), null=True, blank=True)
    has_steps = models.BooleanField(
        _("has step rows"),
        default=False,
        editable=False,
        help_text=_(
            "The step ledger holds rows: of the pass in flight, or of the last failed one."
        ),
    )
    progress_total = models.PositiveBigIntegerField(_("progress total"), null=True, blank=True)
    idle_passes = models.PositiveIntegerField(
        _("idle passes"),
        default=0,
        editable=False,
        help_text=_(
            "Consecutive passes that returned with the cursor unchanged and no step "
            "recorded: a handler that forgets to return p.advance() or p.done()."
        ),
    )
    live_key = KeyField(
        _("live key"),
        max_length=JOB_NAME_LENGTH + 1 + INSTANCE_LENGTH,
        null=True,
        blank=True,
        editable=False,
        help_text=_("job|instance while the run is live; empty once it has finished."),
    )
    queue = KeyField(
        _("queue"),
        max_length=QUEUE_LENGTH,
        default=DEFAULT_QUEUE,
        help_text=_("Which workers take the run: rundueJobs --queue, or every worker."),
    )
    priority = models.SmallIntegerField(
        _("priority"),
        default=0,
        help_text=_("From -100 to 100: among due runs, a higher priority is driven first."),
    )
    result = models.TextField(
        _("result (JSON)"),
        null=True,
        blank=True,
        help_text=_("What the last pass handed to p.done(result=...); empty for none."),
    )
    limit_key = KeyField(
        _("limit key"),
        max_length=LIMIT_KEY_LENGTH,
        null=True,
        blank=True,
        help_text=_("Whose limits the run counts against (C1); empty for the job's own."),
    )
    trace_context = models.TextField(
        _("trace context"),
        null=True,
        blank=True,
        editable=False,
        help_text=_(
            "The W3C trace context of the code that started the run (OpenTelemetry, O3): "
            "its passes' spans link to it."
        ),
    )
    throttled_by = models.CharField(
        _("throttled by"),
        max_length=max(len(value) for value in Throttle.values),
        choices=Throttle.choices,
        blank=True,
        default="",
        help_text=_("The limit the run waits for: its last claim found it reached (C5)."),
    )

    objects: ClassVar[RunQuerySet[Run]] = RunQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        verbose_name = _("run")
        verbose_name_plural = _("runs")
        permissions = [
            ("cancel_run", _("Can cancel a run")),
            ("retry_run", _("Can retry a failed or cancelled run")),
            ("release_run", _("Can release a held run")),
        ]
        indexes = [
            # The drive's due read (D1, D7) is read in this index's order:
            # status first, so its cost tracks live runs, not the retained
            # history; then priority, highest first, and due order within it.
            models.Index(
                fields=["status", "-priority", "next_attempt_at", "id"], name="leasejobs_run_due"
            ),
            # The admin's list (A1): newest first, filtered by status, job or
            # failure code, over a million retained runs without a sort.
            models.Index(fields=["status", "id"], name="leasejobs_run_status"),
            models.Index(fields=["job", "id"], name="leasejobs_run_job"),
            models.Index(fields=["failure_code", "id"], name="leasejobs_run_failure"),
            models.Index(fields=["instance", "id"], name="leasejobs_run_instance"),
        ]
        constraints = [
            # Coalescing (R1) is the database's decision, not a read-then-insert:
            # NULLs do not collide, so finished runs release their key.
            models.UniqueConstraint(fields=["live_key"], name="leasejobs_run_live_key"),
            models.CheckConstraint(
                condition=models.Q(priority__gte=PRIORITY_MIN, priority__lte=PRIORITY_MAX),
                name="leasejobs_run_priority_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job}[{self.instance}] {self.id} ({self.status})"

    @property
    def is_live(self) -> bool:
        return self.status in LIVE_STATUSES

    def lease_state(self, now: datetime) -> LeaseState:
        """Where this run's lease stands at *now*, the database's time (L1; A8, C5).

        The one judgement of a run's lease that the admin, ``leasejobs_status``
        and the task results show: *now* is read from the database's clock
        (``get_clock().now(using)``) once per page or command and passed in,
        never the web server's. A begun lease is held until its expiry, then
        expired (L3). A run whose last claim its job's limit refused reads as
        waiting for that limit (``throttled_by`` says which) even while a drive
        holds a new claim on it: that claim only asks the limit again, and is
        let go unbegun when it is still reached (C2, C3).
        """
        if self.status != RunStatus.RUNNING:
            return LeaseState.FREE
        expiry = self.next_attempt_at
        expired = expiry is None or expiry <= now
        if self.lease_owner and self.lease_began_at is not None:
            return LeaseState.EXPIRED if expired else LeaseState.LEASED
        if self.throttled_by:
            return LeaseState.THROTTLED
        if self.lease_owner:
            return LeaseState.EXPIRED if expired else LeaseState.CLAIMED
        return LeaseState.FREE

    def as_written(self, **values: Any) -> Run:
        """This run as a write just left it, for the signal that reports the write.

        *values* are the columns the write set; the columns it set to the
        database's time are deferred, read only if a receiver asks for them,
        so reporting an outcome costs no statement of its own.
        """
        # Every column in its place, the deferred ones as DEFERRED: Model.from_db()'s
        # fast path, a third of the time of handing it the others by name.
        names = _attnames()
        data = [
            DEFERRED
            if name in _DATABASE_TIMED
            else values[name]
            if name in values
            else getattr(self, name)
            for name in names
        ]
        return type(self).from_db(self._state.db, names, data)

    def decoded_payload(self) -> Decoded:
        return decode(self.payload)

    def decoded_cursor(self) -> Decoded:
        return decode(self.cursor)

    def decoded_counters(self) -> Decoded:
        return decode(self.counters, empty={})

    def decoded_rerun_payload(self) -> Decoded:
        return decode(self.rerun_payload)

    def decoded_result(self) -> Decoded:
        return decode(self.result)

    def decoded(self) -> dict[str, Decoded]:
        """The payload, cursor and counters, each decoded (or the reason it is not)."""
        return {
            "payload": self.decoded_payload(),
            "cursor": self.decoded_cursor(),
            "counters": self.decoded_counters(),
        }

    @property
    def decode_errors(self) -> dict[str, str]:
        """Which JSON columns do not parse, and why (empty when all do)."""
        return {name: value.error for name, value in self.decoded().items() if value.error}


# functools.cache is thread-safe; its list is shared, and only ever read.
@cache
def _attnames() -> list[str]:
    """The run's columns, in the order ``Model.from_db()`` takes them."""
    return [field.attname for field in Run._meta.concrete_fields]
