from __future__ import annotations

from django.contrib import admin
from django.urls import path

from django_leasejobs.views import metrics

urlpatterns = [
    path("admin/", admin.site.urls),
    path("metrics/leasejobs", metrics, name="leasejobs-metrics"),
]
