"""The order page: GET shows a form and the latest jobs; POST enqueues and redirects."""

from __future__ import annotations

import json
import uuid
from typing import Any

import durabl_django
from django import forms
from django.contrib import messages
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

RECENT_JOBS = 15


class OrderForm(forms.Form):
    email = forms.EmailField(initial="ada@example.com")
    payment = forms.ChoiceField(
        choices=[
            ("invoice", "Invoice: a receipt and a two-step fulfilment, both succeed"),
            ("card", "Card: the charge is declined, twice, and the job fails"),
        ],
        initial="invoice",
        widget=forms.RadioSelect,
    )


def place_order(email: str, payment: str) -> str:
    """Enqueue the order's jobs once the transaction commits; the order id."""
    order_id = uuid.uuid4().hex[:8]
    with transaction.atomic():
        # A real shop saves its Order here: the jobs are enqueued only if this commits.
        if payment == "card":
            durabl_django.enqueue_on_commit(
                "charge-card",
                {"order_id": order_id, "amount": "42.00 EUR"},
                max_attempts=2,
                backoff="fixed",
                backoff_delay=2,
            )
        else:
            data = {"order_id": order_id, "email": email}
            durabl_django.enqueue_on_commit("send-receipt", data, dedupe_key=f"receipt:{order_id}")
            durabl_django.enqueue_on_commit("fulfil-order", data)
    return order_id


def payload_json(data: Any) -> str:
    """A job's payload as indented JSON (values JSON has no type for, such as dates, as
    text); the template escapes it."""
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def index(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        form = OrderForm(request.POST)
        if form.is_valid():
            order_id = place_order(form.cleaned_data["email"], form.cleaned_data["payment"])
            messages.success(request, f"Order {order_id} placed: its jobs are queued.")
            return redirect("orders:index")
    else:
        form = OrderForm()
    queue = durabl_django.get_queue()
    context = {
        "form": form,
        "jobs": [
            {"job": job, "payload": payload_json(job.data)}
            for job in queue.list_jobs(limit=RECENT_JOBS)
        ],
        "stats": queue.get_stats(),
    }
    return render(request, "orders/index.html", context)
