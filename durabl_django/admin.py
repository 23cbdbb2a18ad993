"""The durabl admin: a list per job status with its actions, a job's page, the queue
overview, schedules and workers, under "Durabl" on the default admin site.

Jobs are not ORM rows. The placeholder models in :mod:`durabl_django.models` give each
page an app-index entry and Django's permission machinery; the ModelAdmins below replace
the usual add/change/delete views with the pages in :mod:`durabl_django.views` and
:mod:`durabl_django.admin_actions`, each wrapped in ``admin_site.admin_view`` (staff
login, CSRF protection, no caching).

URLs (under the admin's root), ``<list>`` being ``job`` (failed), ``pendingjob``,
``activejob``, ``completedjob``, ``supersededjob`` or ``cancelledjob``:

- ``durabl_django/<list>/``: the list (``?type=&kind=&q=&d=&o=&p=``); its action form
  posts here; ``job/?status=...`` sends on to that status's list
- ``durabl_django/<list>/<id>/``: a job's page
- ``durabl_django/<list>/<action>/``: confirm, then act on the selected ids
  (``_selected_action``) or on every match (``select_across=1``), for each action
  :data:`durabl_django.admin_actions.ACTION_STATUSES` offers on that list (``retry``,
  ``cancel``, ``delete``, ``run_now``)
- ``durabl_django/<list>/<id>/<action>/``: the same for one job
- ``durabl_django/queueoverview/``, ``jobschedule/``, ``workerprocess/``,
  ``eventsubscription/``: the overview (per-type counts, lag, the last hour's chart), the
  schedules, the workers and the event subscriptions
- ``durabl_django/``: the section's own page (Django's app index) shows the overview too
  (``templates/admin/durabl_django/app_index.html``)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path

from durabl_django import admin_actions, admin_controls, admin_signal
from durabl_django.admin_support import (
    DELETE_PERMISSION,
    LISTED_STATUSES,
    VIEW_PERMISSION,
    has_perm,
)
from durabl_django.models import (
    ActiveJob,
    CancelledJob,
    CompletedJob,
    EventSubscription,
    Job,
    JobSchedule,
    PendingJob,
    QueueOverview,
    SupersededJob,
    WorkerProcess,
)
from durabl_django.views import detail, lists, overview, registry

View = Callable[..., HttpResponse]

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Model]
else:  # ModelAdmin is generic only in django-stubs
    _ModelAdmin = admin.ModelAdmin


class DurablAdmin(_ModelAdmin):
    """Shared by every durabl page: permissions come from the placeholder ``Job`` model,
    whatever the proxy, and nothing is ever added or changed through a form."""

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return has_perm(request, VIEW_PERMISSION)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_module_permission(self, request: HttpRequest) -> bool:
        return has_perm(request, VIEW_PERMISSION)

    def wrap(self, view: View, *args: Any) -> Callable[..., HttpResponse]:
        """``view(self, request, *args, **url_kwargs)`` behind the admin's checks."""

        def wrapper(request: HttpRequest, **kwargs: Any) -> HttpResponse:
            return view(self, request, *args, **kwargs)

        wrapper.model_admin = self  # type: ignore[attr-defined]
        return self.admin_site.admin_view(wrapper)

    def name(self, suffix: str) -> str:
        return f"{self.opts.app_label}_{self.opts.model_name}_{suffix}"

    def detail_urls(self) -> list[URLPattern]:
        page = self.wrap(detail.job_detail)
        return [
            path("<str:job_id>/", page, name=self.name("detail")),
            # Django's own name for an object's page: "Recent actions" links through it.
            path("<str:job_id>/", page, name=self.name("change")),
        ]


class StatusJobAdmin(DurablAdmin):
    """The list of one status (``status``) and the pages of its jobs, with the actions
    :data:`durabl_django.admin_actions.ACTION_STATUSES` offers on it (one job, selected,
    or every match)."""

    status = ""

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return (
            self.status != "active"
            and has_perm(request, VIEW_PERMISSION)
            and has_perm(request, DELETE_PERMISSION)
        )

    def get_urls(self) -> list[URLPattern]:
        urls = [path("", self.wrap(status_changelist), name=self.name("changelist"))]
        for name, statuses in admin_actions.ACTION_STATUSES.items():
            if self.status in statuses:
                urls += [
                    path(
                        f"{name}/",
                        self.wrap(admin_actions.bulk_action, name),
                        name=self.name(name),
                    ),
                    path(
                        f"<str:job_id>/{name}/",
                        self.wrap(admin_actions.single_action, name),
                        name=self.name(f"{name}_one"),
                    ),
                ]
        if self.status == "pending":  # a job waiting for a signal is pending
            signal = self.wrap(admin_signal.send_signal)
            urls.append(path("<str:job_id>/signal/", signal, name=self.name("signal_one")))
        return [*urls, *self.detail_urls()]


def status_changelist(model_admin: StatusJobAdmin, request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        return admin_actions.changelist_action(model_admin, request)
    # The placeholder's list (failed) is where ``job/?status=...`` lands: sent on.
    redirect = lists.status_redirect(request) if model_admin.status == "failed" else None
    return redirect or lists.job_list(model_admin, request, model_admin.status)


#: The placeholder model whose entry lists each status (the failed list is ``Job``'s own).
STATUS_MODELS: dict[str, type[Model]] = {
    "failed": Job,
    "pending": PendingJob,
    "active": ActiveJob,
    "completed": CompletedJob,
    "superseded": SupersededJob,
    "cancelled": CancelledJob,
}


class PageAdmin(DurablAdmin):
    """A page of its own (``page(model_admin, request)``) as the entry's changelist, and
    the controls posted to it (``controls``: ``view(model_admin, request, action)`` at
    ``<action>/`` for each action)."""

    page: ClassVar[View]
    controls: ClassVar[tuple[View | None, tuple[str, ...]]] = (None, ())

    def get_urls(self) -> list[URLPattern]:
        urls = [path("", self.wrap(type(self).page), name=self.name("changelist"))]
        view, actions = type(self).controls
        if view is not None:
            urls += [path(f"{a}/", self.wrap(view, a), name=self.name(a)) for a in actions]
        return urls


def _register() -> None:
    """One ModelAdmin per listed status, and the entries that are a page of their own."""
    for status in LISTED_STATUSES:
        admin_class = type(f"{status.capitalize()}JobAdmin", (StatusJobAdmin,), {"status": status})
        admin.site.register(STATUS_MODELS[status], admin_class)
    schedules = (admin_controls.schedule_control, ("pause", "resume", "run"))
    types = (admin_controls.type_control, ("pause", "resume"))
    for model, page, controls in (
        (JobSchedule, registry.schedule_list, schedules),
        (WorkerProcess, registry.worker_list, (None, ())),
        (EventSubscription, registry.event_list, (None, ())),
        (QueueOverview, overview.queue_overview, types),
    ):
        body = {"page": page, "controls": controls}
        admin.site.register(model, type(f"{model.__name__}Admin", (PageAdmin,), body))


_register()
