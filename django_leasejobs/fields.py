"""Model fields with a meaning of their own."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper

__all__ = ["KeyField"]


class KeyField(models.CharField):  # type: ignore[type-arg]
    """A ``CharField`` that identifies something, so it compares byte for byte (SPEC §12).

    SQLite and PostgreSQL compare text exactly. MariaDB and MySQL compare with
    the table's collation, by default case- and accent-insensitive and
    blind to trailing spaces: there ``Foo``, ``foo``, ``foo `` and ``föo``
    would be one coalescing key, and two steps ``A`` and ``a`` one ledger row.
    So on those backends this field's column takes a binary collation with no
    padding -- chosen here rather than in a migration's SQL, so that every
    later ``AlterField`` keeps it.
    """

    def db_parameters(self, connection: BaseDatabaseWrapper) -> dict[str, Any]:
        parameters = super().db_parameters(connection)
        if connection.vendor == "mysql" and not self.db_collation:
            mariadb = getattr(connection, "mysql_is_mariadb", False)
            parameters["collation"] = "utf8mb4_nopad_bin" if mariadb else "utf8mb4_0900_bin"
        return parameters
