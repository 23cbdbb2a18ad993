from __future__ import annotations

from django.apps import AppConfig


class TestAppConfig(AppConfig):
    name = "tests.django.testapp"
    label = "durabl_testapp"
