"""The app's tables, squashed from the eight migrations before the first release.

A database those eight migrated is already here (``replaces``); a new one
takes this migration alone.
"""

import django.db.models.deletion
import django_leasejobs.fields
import django_leasejobs.ids
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    replaces = [
        ("leasejobs", "0001_initial"),
        ("leasejobs", "0002_keys_origin_schedule_state"),
        ("leasejobs", "0003_run_queue_priority_result"),
        ("leasejobs", "0004_task_attempts"),
        ("leasejobs", "0005_limits"),
        ("leasejobs", "0006_run_idle_passes"),
        ("leasejobs", "0007_observability"),
        ("leasejobs", "0008_schedule_last_outcome_choices"),
    ]

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="PausedQueue",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "queue",
                    django_leasejobs.fields.KeyField(
                        max_length=100, unique=True, verbose_name="queue"
                    ),
                ),
                (
                    "paused_by",
                    models.CharField(
                        blank=True, default="", max_length=150, verbose_name="paused by"
                    ),
                ),
                ("paused_at", models.DateTimeField(verbose_name="paused at")),
                (
                    "note",
                    models.CharField(blank=True, default="", max_length=200, verbose_name="note"),
                ),
            ],
            options={
                "verbose_name": "paused queue",
                "verbose_name_plural": "paused queues",
            },
        ),
        migrations.CreateModel(
            name="PassStat",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "minute",
                    models.DateTimeField(
                        help_text="The minute the passes ended in (UTC).", verbose_name="minute"
                    ),
                ),
                ("job", django_leasejobs.fields.KeyField(max_length=100, verbose_name="job")),
                ("queue", django_leasejobs.fields.KeyField(max_length=100, verbose_name="queue")),
                ("outcome", models.CharField(max_length=10, verbose_name="outcome")),
                ("count", models.BigIntegerField(default=0, verbose_name="passes")),
                ("total_seconds", models.FloatField(default=0.0, verbose_name="total seconds")),
                ("max_seconds", models.FloatField(default=0.0, verbose_name="longest, seconds")),
                ("le_00", models.BigIntegerField(default=0)),
                ("le_01", models.BigIntegerField(default=0)),
                ("le_02", models.BigIntegerField(default=0)),
                ("le_03", models.BigIntegerField(default=0)),
                ("le_04", models.BigIntegerField(default=0)),
                ("le_05", models.BigIntegerField(default=0)),
                ("le_06", models.BigIntegerField(default=0)),
                ("le_07", models.BigIntegerField(default=0)),
                ("le_08", models.BigIntegerField(default=0)),
                ("le_09", models.BigIntegerField(default=0)),
                ("le_10", models.BigIntegerField(default=0)),
                ("le_11", models.BigIntegerField(default=0)),
                ("le_12", models.BigIntegerField(default=0)),
                ("le_13", models.BigIntegerField(default=0)),
            ],
            options={
                "verbose_name": "pass statistic",
                "verbose_name_plural": "pass statistics",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("minute", "job", "queue", "outcome"), name="leasejobs_passstat_key"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="RateState",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("job", django_leasejobs.fields.KeyField(max_length=100, verbose_name="job")),
                (
                    "key",
                    django_leasejobs.fields.KeyField(
                        blank=True, default="", max_length=200, verbose_name="limit key"
                    ),
                ),
                ("tat", models.DateTimeField(verbose_name="next begin allowed at")),
            ],
            options={
                "verbose_name": "rate state",
                "verbose_name_plural": "rate states",
                "constraints": [
                    models.UniqueConstraint(fields=("job", "key"), name="leasejobs_ratestate_key")
                ],
            },
        ),
        migrations.CreateModel(
            name="Run",
            fields=[
                (
                    "id",
                    models.CharField(
                        default=django_leasejobs.ids.new_id,
                        editable=False,
                        max_length=26,
                        primary_key=True,
                        serialize=False,
                        verbose_name="id",
                    ),
                ),
                ("job", django_leasejobs.fields.KeyField(max_length=100, verbose_name="job")),
                (
                    "instance",
                    django_leasejobs.fields.KeyField(
                        default="default", max_length=200, verbose_name="instance"
                    ),
                ),
                (
                    "origin",
                    models.CharField(
                        choices=[
                            ("api", "start()"),
                            ("schedule", "Schedule"),
                            ("hand", "Run now (by hand)"),
                            ("retry", "Retry of an earlier run"),
                            ("follow_up", "Follow-up of a kicked run"),
                            ("task", "Django task"),
                        ],
                        default="api",
                        help_text="How the run began.",
                        max_length=9,
                        verbose_name="origin",
                    ),
                ),
                ("payload", models.TextField(default="null", verbose_name="payload (JSON)")),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("running", "Running"),
                            ("done", "Done"),
                            ("failed", "Failed"),
                            ("cancelled", "Cancelled"),
                            ("held", "Held"),
                        ],
                        default="running",
                        max_length=9,
                        verbose_name="status",
                    ),
                ),
                (
                    "cursor",
                    models.TextField(
                        blank=True,
                        help_text="Where the next pass resumes; empty until a pass commits.",
                        null=True,
                        verbose_name="cursor (JSON)",
                    ),
                ),
                ("counters", models.TextField(default="{}", verbose_name="counters (JSON)")),
                (
                    "attempts",
                    models.PositiveIntegerField(
                        default=0, help_text="Consecutive failed passes.", verbose_name="attempts"
                    ),
                ),
                (
                    "failure_code",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("handler_failed", "Handler failed"),
                            ("step_exhausted", "Step exhausted"),
                            ("timeout", "Timeout"),
                            ("lease_expired", "Lease expired"),
                            ("interrupted", "Interrupted"),
                            ("lease_too_short", "Lease too short"),
                            ("decode_failed", "Decode failed"),
                            ("cancelled", "Cancelled"),
                        ],
                        default="",
                        max_length=15,
                        verbose_name="failure code",
                    ),
                ),
                ("last_error", models.TextField(blank=True, default="", verbose_name="last error")),
                ("started_at", models.DateTimeField(verbose_name="started at")),
                ("updated_at", models.DateTimeField(verbose_name="updated at")),
                (
                    "next_attempt_at",
                    models.DateTimeField(
                        blank=True,
                        help_text="When the run is next due; while leased, when the lease expires.",
                        null=True,
                        verbose_name="next attempt at",
                    ),
                ),
                ("ended_at", models.DateTimeField(blank=True, null=True, verbose_name="ended at")),
                (
                    "lease_owner",
                    models.CharField(
                        blank=True, max_length=26, null=True, verbose_name="lease owner"
                    ),
                ),
                (
                    "lease_began_at",
                    models.DateTimeField(blank=True, null=True, verbose_name="lease began at"),
                ),
                (
                    "lease_holder",
                    models.CharField(
                        blank=True,
                        default="",
                        help_text="The process that claimed the run: host, pid and process start time.",
                        max_length=255,
                        verbose_name="lease holder",
                    ),
                ),
                (
                    "admission_misses",
                    models.PositiveIntegerField(
                        blank=True, null=True, verbose_name="admission misses"
                    ),
                ),
                (
                    "rerun_requested",
                    models.BooleanField(
                        default=False,
                        help_text="Start one more run with the latest payload when this one completes.",
                        verbose_name="rerun requested",
                    ),
                ),
                (
                    "rerun_payload",
                    models.TextField(blank=True, null=True, verbose_name="rerun payload (JSON)"),
                ),
                (
                    "has_steps",
                    models.BooleanField(
                        default=False,
                        editable=False,
                        help_text="The step ledger holds rows: of the pass in flight, or of the last failed one.",
                        verbose_name="has step rows",
                    ),
                ),
                (
                    "progress_total",
                    models.PositiveBigIntegerField(
                        blank=True, null=True, verbose_name="progress total"
                    ),
                ),
                (
                    "idle_passes",
                    models.PositiveIntegerField(
                        default=0,
                        editable=False,
                        help_text="Consecutive passes that returned with the cursor unchanged and no step recorded: a handler that forgets to return p.advance() or p.done().",
                        verbose_name="idle passes",
                    ),
                ),
                (
                    "live_key",
                    django_leasejobs.fields.KeyField(
                        blank=True,
                        editable=False,
                        help_text="job|instance while the run is live; empty once it has finished.",
                        max_length=301,
                        null=True,
                        verbose_name="live key",
                    ),
                ),
                (
                    "queue",
                    django_leasejobs.fields.KeyField(
                        default="default",
                        help_text="Which workers take the run: rundueJobs --queue, or every worker.",
                        max_length=100,
                        verbose_name="queue",
                    ),
                ),
                (
                    "priority",
                    models.SmallIntegerField(
                        default=0,
                        help_text="From -100 to 100: among due runs, a higher priority is driven first.",
                        verbose_name="priority",
                    ),
                ),
                (
                    "result",
                    models.TextField(
                        blank=True,
                        help_text="What the last pass handed to p.done(result=...); empty for none.",
                        null=True,
                        verbose_name="result (JSON)",
                    ),
                ),
                (
                    "limit_key",
                    django_leasejobs.fields.KeyField(
                        blank=True,
                        help_text="Whose limits the run counts against (C1); empty for the job's own.",
                        max_length=200,
                        null=True,
                        verbose_name="limit key",
                    ),
                ),
                (
                    "trace_context",
                    models.TextField(
                        blank=True,
                        editable=False,
                        help_text="The W3C trace context of the code that started the run (OpenTelemetry, O3): its passes' spans link to it.",
                        null=True,
                        verbose_name="trace context",
                    ),
                ),
                (
                    "throttled_by",
                    models.CharField(
                        blank=True,
                        choices=[("concurrency", "Concurrency"), ("rate", "Rate")],
                        default="",
                        help_text="The limit the run waits for: its last claim found it reached (C5).",
                        max_length=11,
                        verbose_name="throttled by",
                    ),
                ),
            ],
            options={
                "verbose_name": "run",
                "verbose_name_plural": "runs",
                "permissions": [
                    ("cancel_run", "Can cancel a run"),
                    ("retry_run", "Can retry a failed or cancelled run"),
                    ("release_run", "Can release a held run"),
                ],
                "indexes": [
                    models.Index(
                        fields=["status", "-priority", "next_attempt_at", "id"],
                        name="leasejobs_run_due",
                    ),
                    models.Index(fields=["status", "id"], name="leasejobs_run_status"),
                    models.Index(fields=["job", "id"], name="leasejobs_run_job"),
                    models.Index(fields=["failure_code", "id"], name="leasejobs_run_failure"),
                    models.Index(fields=["instance", "id"], name="leasejobs_run_instance"),
                ],
                "constraints": [
                    models.UniqueConstraint(fields=("live_key",), name="leasejobs_run_live_key"),
                    models.CheckConstraint(
                        condition=models.Q(("priority__gte", -100), ("priority__lte", 100)),
                        name="leasejobs_run_priority_range",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="Slot",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("job", django_leasejobs.fields.KeyField(max_length=100, verbose_name="job")),
                (
                    "key",
                    django_leasejobs.fields.KeyField(
                        blank=True, default="", max_length=200, verbose_name="limit key"
                    ),
                ),
                ("number", models.PositiveIntegerField(verbose_name="number")),
                (
                    "run_id",
                    models.CharField(blank=True, max_length=26, null=True, verbose_name="run"),
                ),
                (
                    "owner",
                    models.CharField(
                        blank=True, max_length=26, null=True, verbose_name="lease owner"
                    ),
                ),
            ],
            options={
                "verbose_name": "concurrency slot",
                "verbose_name_plural": "concurrency slots",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("job", "key", "number"), name="leasejobs_slot_number"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="Missed",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("job", django_leasejobs.fields.KeyField(max_length=100, verbose_name="job")),
                ("due_at", models.DateTimeField(verbose_name="due at")),
                (
                    "cause",
                    models.CharField(
                        choices=[
                            ("worker_down", "No drive ran at the due time"),
                            ("paused", "The schedule was paused"),
                        ],
                        max_length=11,
                        verbose_name="cause",
                    ),
                ),
                (
                    "action",
                    models.CharField(
                        choices=[("skipped", "Skipped"), ("caught_up", "Caught up")],
                        max_length=9,
                        verbose_name="action",
                    ),
                ),
                ("recorded_at", models.DateTimeField(verbose_name="recorded at")),
                (
                    "run",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="missed",
                        to="leasejobs.run",
                        verbose_name="run",
                    ),
                ),
            ],
            options={
                "verbose_name": "missed due time",
                "verbose_name_plural": "missed due times",
                "indexes": [models.Index(fields=["recorded_at"], name="leasejobs_missed_recorded")],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("job", "due_at"), name="leasejobs_missed_job_due"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="Schedule",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "job",
                    django_leasejobs.fields.KeyField(
                        max_length=100, unique=True, verbose_name="job"
                    ),
                ),
                ("expression", models.CharField(max_length=200, verbose_name="cron expression")),
                ("timezone", models.CharField(max_length=64, verbose_name="time zone")),
                (
                    "rule",
                    models.CharField(
                        choices=[
                            ("skip", "Skip: record them, run nothing"),
                            ("catch_up_once", "Catch up once: record them, run once"),
                            ("required", "Required: run every one, oldest first"),
                        ],
                        default="catch_up_once",
                        max_length=13,
                        verbose_name="missed-run rule",
                    ),
                ),
                (
                    "next_due_at",
                    models.DateTimeField(blank=True, null=True, verbose_name="next due at"),
                ),
                (
                    "enabled",
                    models.BooleanField(
                        default=True,
                        help_text="False once the job's schedule left the code.",
                        verbose_name="enabled",
                    ),
                ),
                (
                    "paused_at",
                    models.DateTimeField(blank=True, null=True, verbose_name="paused at"),
                ),
                (
                    "paused_by",
                    models.CharField(
                        blank=True, default="", max_length=150, verbose_name="paused by"
                    ),
                ),
                (
                    "pause_note",
                    models.CharField(
                        blank=True, default="", max_length=200, verbose_name="pause note"
                    ),
                ),
                (
                    "last_paused_at",
                    models.DateTimeField(blank=True, null=True, verbose_name="last paused at"),
                ),
                (
                    "resumed_at",
                    models.DateTimeField(blank=True, null=True, verbose_name="resumed at"),
                ),
                (
                    "last_due_at",
                    models.DateTimeField(blank=True, null=True, verbose_name="last due at"),
                ),
                ("seen_at", models.DateTimeField(blank=True, null=True, verbose_name="seen at")),
                (
                    "last_run_at",
                    models.DateTimeField(blank=True, null=True, verbose_name="last run at"),
                ),
                (
                    "last_outcome",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("running", "Running"),
                            ("done", "Done"),
                            ("failed", "Failed"),
                            ("cancelled", "Cancelled"),
                            ("held", "Held"),
                        ],
                        default="",
                        max_length=16,
                        verbose_name="last outcome",
                    ),
                ),
                (
                    "last_success_at",
                    models.DateTimeField(blank=True, null=True, verbose_name="last success at"),
                ),
                (
                    "overdue_since",
                    models.DateTimeField(
                        blank=True,
                        help_text="Set when job_overdue was sent for the current episode.",
                        null=True,
                        verbose_name="overdue since",
                    ),
                ),
                ("updated_at", models.DateTimeField(auto_now=True, verbose_name="updated at")),
                (
                    "last_run",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="leasejobs.run",
                        verbose_name="last run",
                    ),
                ),
            ],
            options={
                "verbose_name": "schedule",
                "verbose_name_plural": "schedules",
                "permissions": [
                    ("pause_schedule", "Can pause and resume a schedule"),
                    ("run_schedule_now", "Can run a scheduled job now"),
                ],
                "indexes": [
                    models.Index(fields=["enabled", "next_due_at"], name="leasejobs_schedule_due")
                ],
            },
        ),
        migrations.CreateModel(
            name="Step",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", django_leasejobs.fields.KeyField(max_length=200, verbose_name="name")),
                (
                    "result",
                    models.TextField(
                        blank=True,
                        help_text="Empty = not completed.",
                        null=True,
                        verbose_name="result (JSON)",
                    ),
                ),
                ("attempts", models.PositiveIntegerField(default=0, verbose_name="attempts")),
                ("last_error", models.TextField(blank=True, default="", verbose_name="last error")),
                ("recorded_at", models.DateTimeField(verbose_name="recorded at")),
                (
                    "run",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="steps",
                        to="leasejobs.run",
                        verbose_name="run",
                    ),
                ),
            ],
            options={
                "verbose_name": "step",
                "verbose_name_plural": "steps",
                "constraints": [
                    models.UniqueConstraint(fields=("run", "name"), name="leasejobs_step_run_name")
                ],
            },
        ),
        migrations.CreateModel(
            name="TaskAttempt",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "owner",
                    models.CharField(
                        help_text="The token of the pass's lease.",
                        max_length=26,
                        verbose_name="lease owner",
                    ),
                ),
                ("worker_id", models.CharField(max_length=64, verbose_name="worker id")),
                ("began_at", models.DateTimeField(verbose_name="began at")),
                (
                    "error_class",
                    models.CharField(
                        blank=True,
                        default="",
                        help_text="The dotted path of the exception the attempt ended with; empty for none.",
                        max_length=255,
                        verbose_name="error class",
                    ),
                ),
                ("traceback", models.TextField(blank=True, default="", verbose_name="traceback")),
                (
                    "run",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="task_attempts",
                        to="leasejobs.run",
                        verbose_name="run",
                    ),
                ),
            ],
            options={
                "verbose_name": "task attempt",
                "verbose_name_plural": "task attempts",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("run", "owner"), name="leasejobs_taskattempt_owner"
                    )
                ],
            },
        ),
    ]
