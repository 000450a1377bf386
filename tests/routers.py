"""A database router that sends every read of the app's models to a replica (SPEC §12)."""

from __future__ import annotations

from typing import Any

from django.db.models import Model

#: The alias reads go to: tests/settings.py's mirror of the default database.
REPLICA = "replica"


class ReadsToReplica:
    """Reads of ``leasejobs`` models go to :data:`REPLICA`; writes to the default alias."""

    def db_for_read(self, model: type[Model], **hints: Any) -> str | None:
        return REPLICA if model._meta.app_label == "leasejobs" else None

    def db_for_write(self, model: type[Model], **hints: Any) -> str | None:
        return None

    def allow_relation(self, obj1: Model, obj2: Model, **hints: Any) -> bool | None:
        # One database seen through two aliases: rows read from either may be related.
        return True

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        return False if db == REPLICA else None  # a mirror: nothing of its own to migrate
