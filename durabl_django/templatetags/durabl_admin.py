"""``{% load durabl_admin %}``: the queue overview for the Durabl section's own page
(Django's app index, ``templates/admin/durabl_django/app_index.html``), which the admin
renders itself and so gives no view of ours to fill its context. The admin's own
``{% get_admin_log %}`` reads its data the same way."""

from __future__ import annotations

from typing import Any

from django import template

from durabl_django.admin_support import VIEW_PERMISSION, has_perm

register = template.Library()


@register.simple_tag(takes_context=True)
def durabl_overview(context: template.Context) -> dict[str, Any]:
    """The overview's context (``views.overview.overview_context``); empty for a user
    without ``view_job`` (the section then shows no overview)."""
    from durabl_django.views.overview import overview_context

    request = context.get("request")
    if request is None or not has_perm(request, VIEW_PERMISSION):
        return {}
    return overview_context(request)
