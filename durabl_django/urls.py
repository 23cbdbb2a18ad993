"""URLs of durabl_django outside the admin: ``path("durabl/", include("durabl_django.urls"))``.

``metrics/`` serves the Prometheus metrics of this process's queue (``durabl.metrics``):
to a staff user's session, or to a scraper sending ``Authorization: Bearer <token>`` with
the token of ``DURABL["METRICS_TOKEN"]``.
"""

from __future__ import annotations

import hmac
import threading
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.views.decorators.http import require_GET

from durabl_django.conf import durabl_settings
from durabl_django.runtime import get_queue

app_name = "durabl_django"

_lock = threading.Lock()
_installed: dict[int, Any] = {}  # id(queue) -> its metrics, installed on first scrape


def _authorized(request: HttpRequest) -> bool:
    user = getattr(request, "user", None)
    if user is not None and user.is_active and user.is_staff:
        return True
    token = durabl_settings.METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    return bool(token) and scheme.lower() == "bearer" and hmac.compare_digest(given, str(token))


def _registry() -> Any:
    from durabl import metrics

    queue = get_queue()
    with _lock:
        installed = _installed.get(id(queue))
        if installed is None or installed.queue is not queue:
            installed = metrics.install(queue, registry=metrics.new_registry())
            _installed.clear()
            _installed[id(queue)] = installed
        return installed.registry


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """The metrics in Prometheus' text format; 403 without a staff session or the token."""
    if not _authorized(request):
        return HttpResponse("forbidden\n", status=403, content_type="text/plain")
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return HttpResponse(generate_latest(_registry()), content_type=CONTENT_TYPE_LATEST)


urlpatterns = [path("metrics/", metrics_view, name="metrics")]
