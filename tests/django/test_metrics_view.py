"""``durabl_django.urls`` ``metrics/``: Prometheus text for staff or the bearer token."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import include, path

from durabl_django.runtime import get_queue

urlpatterns = [path("durabl/", include("durabl_django.urls"))]

pytestmark = [pytest.mark.django_db, pytest.mark.urls(__name__)]


def test_staff_see_the_metrics(admin_client: Client) -> None:
    get_queue().enqueue("report", {})
    response = admin_client.get("/durabl/metrics/")
    assert response.status_code == 200
    body = response.content.decode()
    assert 'durabl_jobs{status="pending",type="report"} 1.0' in body
    assert "durabl_oldest_pending_lag_seconds" in body


def test_a_scraper_needs_the_token(client: Client, settings: Any) -> None:
    assert client.get("/durabl/metrics/").status_code == 403
    settings.DURABL = {**settings.DURABL, "METRICS_TOKEN": "t0ken"}
    wrong = client.get("/durabl/metrics/", HTTP_AUTHORIZATION="Bearer nope")
    assert wrong.status_code == 403
    right = client.get("/durabl/metrics/", HTTP_AUTHORIZATION="Bearer t0ken")
    assert right.status_code == 200
    assert b"durabl_jobs_completed_total" in right.content or b"# HELP" in right.content
