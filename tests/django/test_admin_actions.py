"""Retry and delete from the durabl admin: confirmation first (GET changes nothing), then a
CSRF-protected POST that acts and says what it did."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.auth.models import AbstractBaseUser
from django.test import Client
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

import durabl_django
from durabl import JobQueue
from durabl_django import admin_support
from durabl_django.admin_actions import ACTIONS, Outcome, summary
from tests.django.test_admin_helpers import csrf_token, fail_jobs, make_user, messages_of, rows

pytestmark = [pytest.mark.django_db, pytest.mark.on_real_mongo]

FAILED = "admin:durabl_django_job_changelist"
RETRY = "admin:durabl_django_job_retry"
DELETE = "admin:durabl_django_job_delete"


@pytest.fixture
def queue() -> JobQueue:
    return durabl_django.get_queue()


def statuses(queue: JobQueue, ids: list[str]) -> list[str | None]:
    return [job.status if (job := queue.get_job(i)) else None for i in ids]


def confirm(client: Client, url: str, data: dict[str, Any]) -> Any:
    """Open the confirmation page (a GET) and submit it with its own CSRF token."""
    page = client.get(url, data)
    assert page.status_code == 200
    form = {**data, "post": "yes", "csrfmiddlewaretoken": csrf_token(page)}
    return client.post(url, form, follow=True)


def test_list_action_form_shows_a_confirmation_and_changes_nothing(
    csrf_client: Client, queue: JobQueue
) -> None:
    ids = fail_jobs(queue, 3)
    listing = csrf_client.get(reverse(FAILED), {"type": "email"})
    response = csrf_client.post(
        reverse(FAILED) + "?type=email",
        {
            "action": "retry_selected",
            "_selected_action": ids[:2],
            "csrfmiddlewaretoken": csrf_token(listing),
        },
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert "Are you sure you want to retry the 2 selected jobs?" in page
    assert f'action="{reverse(RETRY)}"' in page
    assert '<input type="hidden" name="type" value="email">' in page
    assert statuses(queue, ids) == ["failed"] * 3


def test_retry_confirmation_get_changes_nothing(admin_client: Client, queue: JobQueue) -> None:
    ids = fail_jobs(queue, 2)
    response = admin_client.get(reverse(RETRY), {"_selected_action": ids})
    assert response.status_code == 200
    assert statuses(queue, ids) == ["failed", "failed"]
    # GET with post=yes is still only a confirmation.
    admin_client.get(reverse(RETRY), {"_selected_action": ids, "post": "yes"})
    assert statuses(queue, ids) == ["failed", "failed"]


def test_post_without_csrf_token_is_rejected(csrf_client: Client, queue: JobQueue) -> None:
    ids = fail_jobs(queue, 1)
    for url in (
        reverse(RETRY),
        reverse(DELETE),
        reverse("admin:durabl_django_job_retry_one", args=ids),
        reverse("admin:durabl_django_job_delete_one", args=ids),
    ):
        response = csrf_client.post(url, {"_selected_action": ids, "post": "yes"})
        assert response.status_code == 403, url
    assert statuses(queue, ids) == ["failed"]


def test_retry_selected(csrf_client: Client, queue: JobQueue) -> None:
    ids = fail_jobs(queue, 3)
    response = confirm(csrf_client, reverse(RETRY), {"_selected_action": ids[:2], "p": "1"})
    assert response.redirect_chain == [(reverse(FAILED), 302)]
    assert messages_of(response) == ["2 retried."]
    assert statuses(queue, ids) == ["pending", "pending", "failed"]
    retried = queue.get_job(ids[0])
    assert retried is not None and retried.attempts == 0


def test_retry_reports_a_job_whose_dedupe_key_is_live(csrf_client: Client, queue: JobQueue) -> None:
    blocked = fail_jobs(queue, 1, dedupe="invoice-9")
    others = fail_jobs(queue, 2, dedupe="other-")
    assert queue.enqueue("email", {"again": True}, dedupe_key="invoice-9") is not None
    ids = [*blocked, *others]
    response = confirm(csrf_client, reverse(RETRY), {"_selected_action": ids})
    assert messages_of(response) == ["2 retried, 1 skipped: its dedupe key is live."]
    assert statuses(queue, ids) == ["failed", "pending", "pending"]


def test_retry_reports_jobs_that_are_no_longer_failed(csrf_client: Client, queue: JobQueue) -> None:
    ids = fail_jobs(queue, 2)
    page = csrf_client.get(reverse(RETRY), {"_selected_action": ids})
    assert queue.retry(ids[0])  # someone else got there first
    form = {"_selected_action": ids, "post": "yes", "csrfmiddlewaretoken": csrf_token(page)}
    response = csrf_client.post(reverse(RETRY), form, follow=True)
    assert messages_of(response) == ["1 retried, 1 skipped: it is no longer failed."]


def test_retry_all_matching_covers_every_page(
    csrf_client: Client, queue: JobQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin_support, "ACTION_BATCH", 25)  # 120 jobs: five fetches
    emails = fail_jobs(queue, 120, "email")
    reports = fail_jobs(queue, 2, "report")
    query = {"type": "email", "select_across": "1"}
    page = csrf_client.get(reverse(RETRY), query).content.decode()
    assert "retry all 120 failed jobs of type &quot;email&quot;?" in page
    response = confirm(csrf_client, reverse(RETRY), query)
    assert response.redirect_chain == [(reverse(FAILED) + "?type=email", 302)]
    assert messages_of(response) == ["120 retried."]
    assert set(statuses(queue, emails)) == {"pending"}
    assert statuses(queue, reports) == ["failed", "failed"]


def test_retry_all_link_on_the_list_keeps_the_filters(
    admin_client: Client, queue: JobQueue
) -> None:
    fail_jobs(queue, 2, "email", fatal=True)
    page = admin_client.get(reverse(FAILED), {"type": "email", "kind": "fatal"}).content.decode()
    link = f"{reverse(RETRY)}?type=email&amp;kind=fatal&amp;select_across=1"
    assert f'<a href="{link}">Retry all 2 matching</a>' in page


def test_select_across_from_the_list_retries_all_matches(
    csrf_client: Client, queue: JobQueue
) -> None:
    ids = fail_jobs(queue, 55)
    listing = csrf_client.get(reverse(FAILED))
    form = {
        "action": "retry_selected",
        "_selected_action": ids[-50:],
        "select_across": "1",
        "csrfmiddlewaretoken": csrf_token(listing),
    }
    page = csrf_client.post(reverse(FAILED), form)
    assert "retry all 55 failed jobs?" in page.content.decode()
    form = {"select_across": "1", "post": "yes", "csrfmiddlewaretoken": csrf_token(page)}
    response = csrf_client.post(reverse(RETRY), form, follow=True)
    assert messages_of(response) == ["55 retried."]


def test_delete_selected(csrf_client: Client, queue: JobQueue) -> None:
    ids = fail_jobs(queue, 3)
    pending = queue.enqueue("email", {})
    assert pending is not None
    response = confirm(csrf_client, reverse(DELETE), {"_selected_action": [*ids[:2], pending]})
    assert messages_of(response) == ["2 deleted, 1 skipped: it is no longer failed."]
    assert statuses(queue, [*ids, pending]) == [None, None, "failed", "pending"]


def test_retry_one_from_the_detail_page(csrf_client: Client, queue: JobQueue) -> None:
    [job_id] = fail_jobs(queue, 1)
    # Pending again, the job is shown under the pending list (the sidebar says so).
    detail = reverse("admin:durabl_django_pendingjob_detail", args=[job_id])
    url = reverse("admin:durabl_django_job_retry_one", args=[job_id])
    page = csrf_client.get(url)
    assert f"Are you sure you want to retry the job “{job_id}”?" in page.content.decode()
    assert statuses(queue, [job_id]) == ["failed"]
    response = confirm(csrf_client, url, {})
    assert response.redirect_chain == [(detail, 302)]
    assert messages_of(response) == [f"Job {job_id} retried: it is pending again."]
    assert ">pending</div>" in response.content.decode()


def test_retry_one_whose_key_is_live(csrf_client: Client, queue: JobQueue) -> None:
    [job_id] = fail_jobs(queue, 1, dedupe="k")
    queue.enqueue("email", {}, dedupe_key="k")
    url = reverse("admin:durabl_django_job_retry_one", args=[job_id])
    response = confirm(csrf_client, url, {})
    assert messages_of(response) == [f"Job {job_id} not retried: its dedupe key is live."]


def test_delete_one_from_the_detail_page(csrf_client: Client, queue: JobQueue) -> None:
    [job_id] = fail_jobs(queue, 1)
    url = reverse("admin:durabl_django_job_delete_one", args=[job_id])
    response = confirm(csrf_client, url, {})
    assert response.redirect_chain == [(reverse(FAILED), 302)]
    assert messages_of(response) == [f"Job {job_id} deleted."]
    assert queue.get_job(job_id) is None


def test_actions_are_recorded_in_the_admin_log(
    csrf_client: Client, queue: JobQueue, superuser: AbstractBaseUser
) -> None:
    ids = fail_jobs(queue, 2)
    confirm(csrf_client, reverse(RETRY), {"_selected_action": ids[:1]})
    confirm(csrf_client, reverse(DELETE), {"_selected_action": ids[1:]})
    entries = {(e.object_id, e.action_flag) for e in LogEntry.objects.filter(user=superuser)}
    assert entries == {(ids[0], CHANGE), (ids[1], DELETION)}
    index = csrf_client.get(reverse("admin:index")).content.decode()
    assert reverse("admin:durabl_django_job_change", args=[ids[0]]) in index


def test_nothing_selected_goes_back_with_a_message(csrf_client: Client, queue: JobQueue) -> None:
    fail_jobs(queue, 1)
    listing = csrf_client.get(reverse(FAILED))
    token = csrf_token(listing)
    response = csrf_client.post(
        reverse(FAILED), {"action": "retry_selected", "csrfmiddlewaretoken": token}, follow=True
    )
    assert messages_of(response) == [
        "Items must be selected in order to perform actions on them. No items have been changed."
    ]
    response = csrf_client.post(
        reverse(FAILED), {"action": "", "csrfmiddlewaretoken": token}, follow=True
    )
    assert messages_of(response) == ["No action selected."]


def test_view_only_user_cannot_retry_or_delete(client: Client, queue: JobQueue) -> None:
    ids = fail_jobs(queue, 1)
    client.force_login(make_user("viewer", "view_job"))
    for url in (
        reverse(RETRY),
        reverse(DELETE),
        reverse("admin:durabl_django_job_retry_one", args=ids),
        reverse("admin:durabl_django_job_delete_one", args=ids),
    ):
        assert client.get(url, {"_selected_action": ids}).status_code == 403, url
        response = client.post(url, {"_selected_action": ids, "post": "yes"})
        assert response.status_code == 403, url
    posted = client.post(reverse(FAILED), {"action": "retry_selected", "_selected_action": ids})
    assert posted.status_code == 403
    assert statuses(queue, ids) == ["failed"]


def test_retry_permission_does_not_grant_delete(client: Client, queue: JobQueue) -> None:
    ids = fail_jobs(queue, 2)
    client.force_login(make_user("retrier", "view_job", "retry_job"))
    assert client.post(reverse(DELETE), {"_selected_action": ids, "post": "yes"}).status_code == 403
    response = client.post(reverse(RETRY), {"_selected_action": ids, "post": "yes"}, follow=True)
    assert messages_of(response) == ["2 retried."]


def test_summary_wording() -> None:
    retry, delete = ACTIONS["retry"], ACTIONS["delete"]
    assert summary(retry, Outcome(["a", "b"]))[1] == "2 retried."
    mixed = Outcome(["a"])
    mixed.skipped.update({"key-live": 2, "not-failed": 1})
    assert (
        summary(retry, mixed)[1] == "1 retried, 3 skipped (2 dedupe key live, 1 no longer failed)."
    )
    two = Outcome()
    two.skipped.update({"key-live": 2})
    assert summary(retry, two)[1] == "0 retried, 2 skipped: their dedupe keys are live."
    assert summary(delete, Outcome())[1] == "No failed jobs matched: nothing was deleted."


def test_a_bulk_action_writes_one_log_entry(
    csrf_client: Client, queue: JobQueue, superuser: AbstractBaseUser
) -> None:
    ids = fail_jobs(queue, 60)
    confirm(csrf_client, reverse(DELETE), {"_selected_action": ids})
    [entry] = LogEntry.objects.filter(user=superuser)
    assert entry.action_flag == DELETION and entry.object_id is None
    assert entry.object_repr == "60 failed jobs"
    assert entry.change_message.startswith(f"Deleted 60 failed jobs from the admin: {ids[0]}, ")
    assert entry.change_message.endswith(" and 40 more.")
    index = csrf_client.get(reverse("admin:index")).content.decode()
    assert "60 failed jobs" in index


def test_retry_all_matching_is_one_store_operation_and_one_log_entry(
    csrf_client: Client, queue: JobQueue, superuser: AbstractBaseUser, monkeypatch: Any
) -> None:
    emails = fail_jobs(queue, 30, "email")
    [blocked] = fail_jobs(queue, 1, "email", dedupe="k")
    queue.enqueue("email", {}, dedupe_key="k")  # its key is live: it stays failed
    fail_jobs(queue, 1, "report")
    calls: list[dict[str, Any]] = []
    real = queue.retry_matching

    def one_by_one(job_id: str) -> bool:
        raise AssertionError("retry all matching must not retry job by job")

    def counted(**filters: Any) -> int:
        calls.append(filters)
        return real(**filters)

    monkeypatch.setattr(queue, "retry", one_by_one)
    monkeypatch.setattr(queue, "retry_matching", counted)
    monkeypatch.setattr(durabl_django, "get_queue", lambda: queue)
    response = confirm(csrf_client, reverse(RETRY), {"type": "email", "select_across": "1"})
    assert calls == [{"type": "email"}]
    assert messages_of(response) == ["30 retried, 1 skipped: its dedupe key is live."]
    assert set(statuses(queue, emails)) == {"pending"}
    assert statuses(queue, [blocked]) == ["failed"]
    [entry] = LogEntry.objects.filter(user=superuser)
    assert entry.action_flag == CHANGE and entry.object_repr == "30 failed jobs"
    assert 'every failed job of type "email"' in entry.change_message


def test_delete_all_matching_is_one_store_operation(
    csrf_client: Client, queue: JobQueue, monkeypatch: Any
) -> None:
    fail_jobs(queue, 5, "email")
    kept = fail_jobs(queue, 1, "report")
    pending = queue.enqueue("email", {})

    def one_by_one(job_id: str) -> bool:
        raise AssertionError("delete all matching must not delete job by job")

    monkeypatch.setattr(queue, "delete", one_by_one)
    monkeypatch.setattr(durabl_django, "get_queue", lambda: queue)
    response = confirm(csrf_client, reverse(DELETE), {"type": "email", "select_across": "1"})
    assert messages_of(response) == ["5 deleted."]
    assert queue.count_jobs(status="failed") == 1 and statuses(queue, kept) == ["failed"]
    assert statuses(queue, [pending]) == ["pending"]  # only failed jobs are in the list


def test_forged_bulk_posts_are_refused(client: Client, queue: JobQueue) -> None:
    ids = fail_jobs(queue, 2)
    client.force_login(make_user("viewer", "view_job"))
    for url in (reverse(RETRY), reverse(DELETE)):
        data = {"post": "yes", "select_across": "1"}
        assert client.post(url, data).status_code == 403
    assert statuses(queue, ids) == ["failed", "failed"]


PENDING_LIST = "admin:durabl_django_pendingjob_changelist"


def test_a_pending_job_of_a_type_no_worker_runs_can_be_deleted(
    csrf_client: Client, queue: JobQueue, superuser: AbstractBaseUser
) -> None:
    stuck = queue.enqueue("nobody-runs-this", {"n": 1})
    assert stuck is not None
    detail = reverse("admin:durabl_django_pendingjob_detail", args=[stuck])
    page = csrf_client.get(detail).content.decode()
    url = reverse("admin:durabl_django_pendingjob_delete_one", args=[stuck])
    assert f'href="{url}"' in page
    confirm_page = csrf_client.get(url).content.decode()
    assert "Each pending job is removed" in confirm_page and ">Pending jobs</a>" in confirm_page
    response = confirm(csrf_client, url, {})
    assert response.redirect_chain == [(reverse(PENDING_LIST), 302)]
    assert messages_of(response) == [f"Job {stuck} deleted."]
    assert queue.get_job(stuck) is None


def test_delete_selected_and_all_matching_from_the_pending_list(
    csrf_client: Client, queue: JobQueue
) -> None:
    ids = [queue.enqueue("email", {"n": n}) for n in range(3)]
    other = queue.enqueue("report", {})
    page = csrf_client.get(reverse(PENDING_LIST)).content.decode()
    assert "Delete selected pending jobs" in page and "Retry selected" not in page
    delete = reverse("admin:durabl_django_pendingjob_delete")
    response = confirm(csrf_client, delete, {"_selected_action": ids[:1]})
    assert messages_of(response) == ["1 deleted."]
    response = confirm(csrf_client, delete, {"type": "email", "select_across": "1"})
    assert messages_of(response) == ["2 deleted."]
    assert response.redirect_chain == [(reverse(PENDING_LIST) + "?type=email", 302)]
    assert statuses(queue, [*ids, other]) == [None, None, None, "pending"]


def test_the_active_list_has_no_delete(csrf_client: Client, queue: JobQueue) -> None:
    handle = queue.claim_or_enqueue("report", {})
    assert handle is not None
    page = csrf_client.get(reverse("admin:durabl_django_activejob_changelist")).content.decode()
    assert "Delete selected" not in page
    detail = reverse("admin:durabl_django_activejob_detail", args=[handle.id])
    assert "/delete/" not in csrf_client.get(detail).content.decode()


def test_deleting_from_a_list_skips_a_job_that_left_it(
    csrf_client: Client, queue: JobQueue
) -> None:
    handle = queue.claim_or_enqueue("report", {})  # active: not in the pending list
    assert handle is not None
    delete = reverse("admin:durabl_django_pendingjob_delete")
    response = confirm(csrf_client, delete, {"_selected_action": [handle.id]})
    assert messages_of(response) == ["0 deleted, 1 skipped: it is no longer pending."]
    assert statuses(queue, [handle.id]) == ["active"]


def test_view_only_user_cannot_delete_from_other_lists(client: Client, queue: JobQueue) -> None:
    job_id = queue.enqueue("email", {})
    assert job_id is not None
    client.force_login(make_user("viewer2", "view_job"))
    page = client.get(reverse(PENDING_LIST)).content.decode()
    assert 'name="action"' not in page
    url = reverse("admin:durabl_django_pendingjob_delete_one", args=[job_id])
    assert client.get(url).status_code == 403
    assert client.post(url, {"post": "yes"}).status_code == 403
    bulk = reverse("admin:durabl_django_pendingjob_delete")
    assert client.post(bulk, {"post": "yes", "select_across": "1"}).status_code == 403
    assert statuses(queue, [job_id]) == ["pending"]


def test_a_pending_list_delete_post_needs_a_csrf_token(
    csrf_client: Client, queue: JobQueue
) -> None:
    job_id = queue.enqueue("email", {})
    assert job_id is not None
    url = reverse("admin:durabl_django_pendingjob_delete_one", args=[job_id])
    assert csrf_client.post(url, {"post": "yes"}).status_code == 403
    assert statuses(queue, [job_id]) == ["pending"]


def test_cancel_a_pending_job_from_its_page(
    csrf_client: Client, queue: JobQueue, superuser: AbstractBaseUser
) -> None:
    job_id = queue.enqueue("nobody-runs-this", {})
    assert job_id is not None
    detail = reverse("admin:durabl_django_pendingjob_detail", args=[job_id])
    url = reverse("admin:durabl_django_pendingjob_cancel_one", args=[job_id])
    assert f'href="{url}"' in csrf_client.get(detail).content.decode()
    assert "A pending job ends cancelled at once." in csrf_client.get(url).content.decode()
    response = confirm(csrf_client, url, {})
    assert messages_of(response) == [
        f"Job {job_id} cancelled (a running job stops at its next heartbeat)."
    ]
    assert statuses(queue, [job_id]) == ["cancelled"]
    [entry] = LogEntry.objects.filter(user=superuser)
    assert entry.object_id == job_id and entry.change_message == "Cancelled from the admin."


def test_cancel_a_running_job_requests_it(csrf_client: Client, queue: JobQueue) -> None:
    handle = queue.claim_or_enqueue("report", {})
    assert handle is not None
    url = reverse("admin:durabl_django_activejob_cancel_one", args=[handle.id])
    response = confirm(csrf_client, url, {})
    assert messages_of(response)[0].startswith(f"Job {handle.id} cancelled")
    # Asking again is refused: the request is already there.
    again = confirm(csrf_client, url, {})
    assert messages_of(again) == [
        f"Job {handle.id} not cancelled: it has finished or its cancellation was already requested."
    ]


def test_cancel_selected_from_the_pending_list(csrf_client: Client, queue: JobQueue) -> None:
    ids = [queue.enqueue("email", {"n": n}) for n in range(3)]
    page = csrf_client.get(reverse(PENDING_LIST)).content.decode()
    assert "Cancel selected pending jobs" in page
    cancel = reverse("admin:durabl_django_pendingjob_cancel")
    response = confirm(csrf_client, cancel, {"_selected_action": ids[:2]})
    assert messages_of(response) == ["2 cancelled."]
    assert statuses(queue, ids) == ["cancelled", "cancelled", "pending"]  # type: ignore[arg-type]
    listed = csrf_client.get(reverse("admin:durabl_django_cancelledjob_changelist"))
    assert set(rows(listed)) == set(ids[:2])


def test_cancel_needs_its_permission(client: Client, queue: JobQueue) -> None:
    job_id = queue.enqueue("email", {})
    assert job_id is not None
    client.force_login(make_user("deleter", "view_job", "delete_job"))
    page = client.get(reverse(PENDING_LIST)).content.decode()
    assert "Cancel selected" not in page and "Delete selected pending jobs" in page
    url = reverse("admin:durabl_django_pendingjob_cancel_one", args=[job_id])
    assert client.post(url, {"post": "yes"}).status_code == 403
    assert statuses(queue, [job_id]) == ["pending"]
    client.force_login(make_user("canceller", "view_job", "cancel_job"))
    assert "Cancel selected pending jobs" in client.get(reverse(PENDING_LIST)).content.decode()


def test_no_cancel_on_finished_lists(csrf_client: Client, queue: JobQueue) -> None:
    fail_jobs(queue, 1)
    page = csrf_client.get(reverse(FAILED)).content.decode()
    assert "Cancel selected" not in page
    forged = csrf_client.get(reverse(FAILED))
    token = csrf_token(forged)
    response = csrf_client.post(
        reverse(FAILED),
        {"action": "cancel_selected", "_selected_action": ["x"], "csrfmiddlewaretoken": token},
        follow=True,
    )
    assert messages_of(response) == ["No action selected."]


PENDING_DETAIL = "admin:durabl_django_pendingjob_detail"
RUN_NOW_ONE = "admin:durabl_django_pendingjob_run_now_one"
RUN_NOW = "admin:durabl_django_pendingjob_run_now"
CANCEL = "admin:durabl_django_pendingjob_cancel"


def delayed_jobs(queue: JobQueue, count: int, type: str = "email") -> list[str]:
    ids = [queue.enqueue(type, {"n": n}, delay=3600) for n in range(count)]
    assert all(ids)
    return ids  # type: ignore[return-value]


def due(queue: JobQueue, ids: list[str]) -> list[bool]:
    now = timezone.now()
    return [job.run_at <= now if (job := queue.get_job(i)) else False for i in ids]


def test_run_now_a_delayed_job_from_its_page(
    csrf_client: Client, queue: JobQueue, superuser: AbstractBaseUser
) -> None:
    [job_id] = delayed_jobs(queue, 1)
    [already] = [queue.enqueue("email", {"due": True})]
    url = reverse(RUN_NOW_ONE, args=[job_id])
    page = csrf_client.get(reverse(PENDING_DETAIL, args=[job_id])).content.decode()
    assert f'<a href="{url}" class="button">Run now</a>' in page
    # An already due job has nothing to run sooner: no button.
    assert (
        "Run now" not in csrf_client.get(reverse(PENDING_DETAIL, args=[already])).content.decode()
    )
    confirmation = csrf_client.get(url).content.decode()
    assert f"Are you sure you want to run now the job “{job_id}”?" in confirmation
    assert "Each delayed pending job becomes due now" in confirmation
    assert due(queue, [job_id]) == [False]  # the GET changed nothing
    response = confirm(csrf_client, url, {})
    assert messages_of(response) == [f"Job {job_id} set to run now: it is due."]
    assert response.redirect_chain[-1][0] == reverse(PENDING_DETAIL, args=[job_id])
    assert due(queue, [job_id]) == [True] and statuses(queue, [job_id]) == ["pending"]
    [entry] = LogEntry.objects.filter(user=superuser)
    assert entry.object_id == job_id and entry.change_message == "Set to run now from the admin."
    # Again: it is due now, so it is skipped, and said so.
    again = confirm(csrf_client, url, {})
    assert messages_of(again) == [f"Job {job_id} not set to run now: it is already due."]


def test_run_now_selected_from_the_pending_list(
    csrf_client: Client, queue: JobQueue, superuser: AbstractBaseUser
) -> None:
    ids = delayed_jobs(queue, 3)
    already = queue.enqueue("email", {"due": True})
    assert already is not None
    page = csrf_client.get(reverse(PENDING_LIST)).content.decode()
    assert '<option value="run_now_selected">Run selected delayed jobs now</option>' in page
    listing = csrf_client.get(reverse(PENDING_LIST))
    shown = csrf_client.post(
        reverse(PENDING_LIST),
        {
            "action": "run_now_selected",
            "_selected_action": [*ids[:2], already],
            "csrfmiddlewaretoken": csrf_token(listing),
        },
    )
    assert "Are you sure you want to run now the 3 selected jobs?" in shown.content.decode()
    response = confirm(csrf_client, reverse(RUN_NOW), {"_selected_action": [*ids[:2], already]})
    assert messages_of(response) == ["2 set to run now, 1 skipped: it is already due."]
    assert due(queue, ids) == [True, True, False]
    [entry] = LogEntry.objects.filter(user=superuser)
    assert entry.object_repr == "2 pending jobs" and ids[0] in entry.change_message


def test_run_now_all_matching_is_one_store_operation_and_one_log_entry(
    csrf_client: Client, queue: JobQueue, superuser: AbstractBaseUser, monkeypatch: Any
) -> None:
    emails = delayed_jobs(queue, 30, "email")
    reports = delayed_jobs(queue, 2, "report")
    queue.enqueue("email", {"due": True})
    calls: list[dict[str, Any]] = []
    real = queue.run_now_matching

    def one_by_one(job_id: str) -> bool:
        raise AssertionError("run all matching now must not go job by job")

    def counted(**filters: Any) -> int:
        calls.append(filters)
        return real(**filters)

    monkeypatch.setattr(queue, "run_now", one_by_one)
    monkeypatch.setattr(queue, "run_now_matching", counted)
    monkeypatch.setattr(durabl_django, "get_queue", lambda: queue)
    response = confirm(csrf_client, reverse(RUN_NOW), {"type": "email", "select_across": "1"})
    assert calls == [{"status": "pending", "type": "email"}]
    assert messages_of(response) == ["30 set to run now, 1 skipped: it is already due."]
    assert all(due(queue, emails)) and not any(due(queue, reports))
    [entry] = LogEntry.objects.filter(user=superuser)
    assert entry.action_flag == CHANGE and entry.object_repr == "30 pending jobs"
    assert 'every pending job of type "email"' in entry.change_message


def test_cancel_all_matching_is_one_store_operation_and_one_log_entry(
    csrf_client: Client, queue: JobQueue, superuser: AbstractBaseUser, monkeypatch: Any
) -> None:
    emails = [queue.enqueue("email", {"n": n}) for n in range(25)]
    [report] = [queue.enqueue("report", {})]
    calls: list[dict[str, Any]] = []
    real = queue.cancel_matching

    def one_by_one(job_id: str, reason: str | None = None) -> bool:
        raise AssertionError("cancel all matching must not cancel job by job")

    def counted(**filters: Any) -> int:
        calls.append(filters)
        return real(**filters)

    monkeypatch.setattr(queue, "cancel", one_by_one)
    monkeypatch.setattr(queue, "cancel_matching", counted)
    monkeypatch.setattr(durabl_django, "get_queue", lambda: queue)
    response = confirm(csrf_client, reverse(CANCEL), {"type": "email", "select_across": "1"})
    assert calls == [{"status": "pending", "type": "email"}]
    assert messages_of(response) == ["25 cancelled."]
    assert set(statuses(queue, emails)) == {"cancelled"}  # type: ignore[arg-type]
    assert statuses(queue, [report]) == ["pending"]  # type: ignore[list-item]
    [entry] = LogEntry.objects.filter(user=superuser)
    assert entry.object_repr == "25 pending jobs"
    assert 'every pending job of type "email"' in entry.change_message


def test_run_now_needs_the_retry_permission(client: Client, queue: JobQueue) -> None:
    [job_id] = delayed_jobs(queue, 1)
    detail = reverse(PENDING_DETAIL, args=[job_id])
    client.force_login(make_user("viewer", "view_job"))
    assert "Run now" not in client.get(detail).content.decode()
    assert "run_now_selected" not in client.get(reverse(PENDING_LIST)).content.decode()
    assert client.get(reverse(RUN_NOW_ONE, args=[job_id])).status_code == 403
    for url, data in (
        (reverse(RUN_NOW_ONE, args=[job_id]), {"post": "yes"}),
        (reverse(RUN_NOW), {"post": "yes", "_selected_action": [job_id]}),
        (reverse(RUN_NOW), {"post": "yes", "select_across": "1"}),
    ):
        assert client.post(url, data).status_code == 403
    assert due(queue, [job_id]) == [False]
    client.force_login(make_user("retrier", "view_job", "retry_job"))
    assert "Run now" in client.get(detail).content.decode()


def test_run_now_is_offered_only_on_the_pending_list(csrf_client: Client, queue: JobQueue) -> None:
    fail_jobs(queue, 1)
    assert "run_now_selected" not in csrf_client.get(reverse(FAILED)).content.decode()
    token = csrf_token(csrf_client.get(reverse(FAILED)))
    response = csrf_client.post(
        reverse(FAILED),
        {"action": "run_now_selected", "_selected_action": ["x"], "csrfmiddlewaretoken": token},
        follow=True,
    )
    assert messages_of(response) == ["No action selected."]
    with pytest.raises(NoReverseMatch):
        reverse("admin:durabl_django_job_run_now")
