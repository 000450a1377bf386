# Queues (W4), priority (D7) and a run's result (SPEC §2, revision 2).

import django_leasejobs.fields
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("leasejobs", "0002_keys_origin_schedule_state"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="queue",
            field=django_leasejobs.fields.KeyField(
                default="default",
                help_text="Which workers take the run: rundueJobs --queue, or every worker.",
                max_length=100,
                verbose_name="queue",
            ),
        ),
        migrations.AddField(
            model_name="run",
            name="priority",
            field=models.SmallIntegerField(
                default=0,
                help_text="From -100 to 100: among due runs, a higher priority is driven first.",
                verbose_name="priority",
            ),
        ),
        migrations.AddField(
            model_name="run",
            name="result",
            field=models.TextField(
                blank=True,
                help_text="What the last pass handed to p.done(result=...); empty for none.",
                null=True,
                verbose_name="result (JSON)",
            ),
        ),
        # The due read now goes highest priority first (D7): the same index
        # with priority, descending, between status and the due time.
        migrations.RemoveIndex(model_name="run", name="leasejobs_run_due"),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                fields=["status", "-priority", "next_attempt_at", "id"], name="leasejobs_run_due"
            ),
        ),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.CheckConstraint(
                condition=models.Q(("priority__gte", -100), ("priority__lte", 100)),
                name="leasejobs_run_priority_range",
            ),
        ),
    ]
