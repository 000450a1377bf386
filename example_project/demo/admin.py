from __future__ import annotations

from django.contrib import admin

from .models import Contact


@admin.register(Contact)
class ContactAdmin(admin.ModelAdmin):
    """Browse what the import wrote; the import owns the rows, so they are read-only."""

    list_display = ["external_id", "name", "email", "imported_at"]
    search_fields = ["external_id", "name", "email"]
    date_hierarchy = "imported_at"
    readonly_fields = ["external_id", "name", "email", "imported_at"]
