"""The site's own code the recipes call: what each function was asked to do, in order."""

from __future__ import annotations

#: Every call made, by the test's one thread; the test clears it.
calls: list[str] = []


def send_welcome_email(user_id: int) -> str:
    calls.append(f"welcome:{user_id}")
    return f"welcome mail sent to user {user_id}"


def send_daily_summary() -> None:
    calls.append("daily_summary")


def send_digest() -> None:
    calls.append("digest")


def refresh_rates() -> None:
    calls.append("rates")


def clean_up_sessions() -> None:
    calls.append("sessions")
