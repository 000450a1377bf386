"""D5: every command, its database unreachable, exits non-zero with ONE line on stderr.

PostgreSQL's refusal is two lines ("connection failed: ... refused" and "Is the
server running on that host ..."): the commands must fold it, for cron mail
and alerting that read the first line.
"""

from __future__ import annotations

import pytest

from tests.processes import against_unreachable_database

COMMANDS = [
    ("rundueJobs", "the drive could not run"),
    ("run_due_jobs", "the drive could not run"),
    ("leasejobs_status", "the status could not be read"),
    ("leasejobs_prune", "the prune could not run"),
]

DATABASES = [
    # Port 1 refuses at once; psycopg's message for it has a newline in it.
    pytest.param("postgres://leasejobs:secret@127.0.0.1:1/site", id="postgresql-refused"),
    pytest.param("sqlite:///{tmp_path}/missing/dir/db.sqlite3", id="sqlite-missing"),
]


@pytest.mark.parametrize("url", DATABASES)
@pytest.mark.parametrize(("command", "reason"), COMMANDS)
def test_d5_an_unreachable_database_exits_non_zero_with_one_line(tmp_path, url, command, reason):
    completed = against_unreachable_database(url.format(tmp_path=tmp_path), command)
    assert completed.returncode == 1
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1, completed.stderr
    assert lines[0].startswith(f"CommandError: {reason}: OperationalError: ")
    assert "secret" not in completed.stderr  # no database URL, no password (§10)
    assert completed.stdout == ""
