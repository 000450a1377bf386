"""URLconf of ``benchmarks.admin_settings``: only the admin, which admin_list.py measures."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
