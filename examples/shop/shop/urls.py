"""The shop's URLs: the order page at ``/`` and Django's admin (with durabl's pages) at
``/admin/``."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("orders.urls")),
]
