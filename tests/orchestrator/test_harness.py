"""The step machine through OrchestrationHarness: replay, crashes, nondeterminism, now/uuid,
storable results, the journal budget, fatal errors, sleep and timeouts."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import durabl
from durabl import FatalJobError, Job, JournalTooLarge, NondeterminismError, NonRetryable
from durabl.model.abort import AbortSignal, JobAborted
from durabl.model.options import MAX_LOG_ENTRIES, MAX_LOG_MESSAGE_BYTES, MAX_PAYLOAD_BYTES
from durabl.orchestrator import OrchestrationContext, StepKeys, StepResultError
from durabl.testing import FakeClock, OrchestrationHarness


class Stripe:
    """A fake payment API that dedupes on idempotency keys, as the real ones do."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.charges: dict[str, str] = {}

    def charge(self, amount: int, idempotency_key: str) -> str:
        self.calls.append(idempotency_key)
        return self.charges.setdefault(idempotency_key, f"ch_{len(self.charges) + 1}")


def billing(stripe: Stripe, counts: dict[str, int]) -> Any:
    def count(name: str) -> None:
        counts[name] = counts.get(name, 0) + 1

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        def load(keys: StepKeys, signal: AbortSignal) -> dict[str, Any]:
            count("load")
            return {"amount": job.data["amount"]}

        invoice = octx.step("load-invoice", load)

        def charge(keys: StepKeys, signal: AbortSignal) -> str:
            count("charge")
            return stripe.charge(invoice["amount"], keys.idempotency_key)

        charge_id = octx.step("charge", charge)
        octx.step("record", lambda keys, signal: count("record") or charge_id)
        octx.log(f"charged {charge_id}")

    return body


@pytest.fixture
def stripe() -> Stripe:
    return Stripe()


@pytest.fixture
def counts() -> dict[str, int]:
    return {}


def names(t: OrchestrationHarness) -> list[str]:
    return [s.name for s in t.steps]


# -- replay and crashes ------------------------------------------------------------------------


def test_run_journals_every_step_in_order(stripe: Stripe, counts: dict[str, int]) -> None:
    t = OrchestrationHarness(billing(stripe, counts), data={"amount": 500})
    assert t.run() == "completed"
    assert names(t) == ["load-invoice", "charge", "record"]
    assert [s.result for s in t.steps] == [{"amount": 500}, "ch_1", "ch_1"]
    assert [s.seq for s in t.steps] == [0, 1, 2]
    assert t.attempts == 1
    assert t.logs == ["charged ch_1"]


def test_crash_after_a_step_resumes_without_running_it_again(
    stripe: Stripe, counts: dict[str, int]
) -> None:
    t = OrchestrationHarness(billing(stripe, counts), data={"amount": 500})
    assert t.crash_after("charge") == "crashed"
    assert names(t) == ["load-invoice", "charge"]
    assert t.resume() == "completed"
    assert counts == {"load": 1, "charge": 1, "record": 1}
    assert len(stripe.calls) == 1
    assert names(t) == ["load-invoice", "charge", "record"]
    assert t.attempts == 2


def test_crash_before_the_journal_append_runs_the_step_again_with_the_same_key(
    stripe: Stripe, counts: dict[str, int]
) -> None:
    t = OrchestrationHarness(billing(stripe, counts), data={"amount": 500})
    assert t.crash_before("charge") == "crashed"
    assert names(t) == ["load-invoice"]
    assert t.resume() == "completed"
    assert counts["charge"] == 2  # at-least-once: the side effect ran twice...
    assert stripe.calls == ["job-1:charge:1", "job-1:charge:1"]  # ...under one key
    assert len(stripe.charges) == 1  # so the payment API made one charge
    assert t.steps[1].result == "ch_1"


def test_replayed_step_returns_the_journaled_result_without_calling_fn() -> None:
    seen: list[int] = []

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        n = octx.step("draw", lambda keys, signal: seen.append(1) or 41)
        seen.append(octx.step("use", lambda keys, signal: n + 1))

    t = OrchestrationHarness(body)
    t.crash_after("draw")
    t.resume()
    assert seen == [1, 42]


def test_the_result_is_what_the_completed_body_returned() -> None:
    def body(job: Job[Any], octx: OrchestrationContext) -> dict[str, int]:
        return {"n": octx.step("draw", lambda keys, signal: 41) + 1}

    t = OrchestrationHarness(body)
    t.crash_after("draw")
    assert t.result is None  # a crashed attempt returned nothing
    assert t.resume() == "completed"
    assert t.result == {"n": 42}


def test_a_body_that_swallows_the_crash_cannot_carry_on(counts: dict[str, int]) -> None:
    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        try:
            octx.step("a", lambda keys, signal: 1)
        except Exception:
            pass
        octx.step("b", lambda keys, signal: counts.setdefault("b", 1))

    t = OrchestrationHarness(body)
    assert t.crash_after("a") == "crashed"
    assert counts == {}
    assert names(t) == ["a"]


def test_crash_point_that_never_runs_is_an_assertion_error() -> None:
    t = OrchestrationHarness(lambda job, octx: octx.step("a", lambda keys, signal: 1))
    with pytest.raises(AssertionError, match="'nope' did not run"):
        t.crash_after("nope")
    assert t.status == "completed"


def test_run_twice_is_refused() -> None:
    t = OrchestrationHarness(lambda job, octx: None)
    t.run()
    with pytest.raises(RuntimeError, match="resume"):
        t.run()


def test_steps_may_share_a_name_and_get_distinct_keys() -> None:
    keys: list[str] = []

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        for page in range(3):
            octx.step("fetch", lambda k, s, page=page: keys.append(k.idempotency_key) or page)

    t = OrchestrationHarness(body)
    t.crash_after("fetch")
    t.resume()
    assert [s.result for s in t.steps] == [0, 1, 2]
    assert keys == ["job-1:fetch:0", "job-1:fetch:1", "job-1:fetch:2"]


def test_an_explicit_idempotency_key_is_passed_through_unchanged() -> None:
    seen: list[StepKeys] = []

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.step(
            "ensure-customer",
            lambda keys, signal: seen.append(keys),
            idempotency_key=f"{job.data['user']}:customer",
        )

    OrchestrationHarness(body, data={"user": "u1"}).run()
    assert seen == [StepKeys("u1:customer", "job-1", "ensure-customer", 0)]


def test_a_step_error_propagates_and_the_step_runs_again_on_resume() -> None:
    tries: list[int] = []

    def flaky(keys: StepKeys, signal: AbortSignal) -> str:
        tries.append(1)
        if len(tries) == 1:
            raise ConnectionError("upstream down")
        return "ok"

    t = OrchestrationHarness(lambda job, octx: octx.step("call", flaky))
    with pytest.raises(ConnectionError):
        t.run()
    assert t.status == "failed" and isinstance(t.error, ConnectionError)
    assert t.steps == []
    assert t.resume() == "completed"
    assert len(tries) == 2 and t.attempts == 2


def test_step_fn_must_take_keys_and_signal() -> None:
    t = OrchestrationHarness(lambda job, octx: octx.step("a", lambda: 1))  # type: ignore[arg-type,misc]
    with pytest.raises(TypeError, match=r"accept \(keys, signal\)"):
        t.run()


# -- nondeterminism ---------------------------------------------------------------------------


def test_resume_with_a_renamed_step_raises_nondeterminism(
    stripe: Stripe, counts: dict[str, int]
) -> None:
    t = OrchestrationHarness(billing(stripe, counts), data={"amount": 5})
    t.crash_after("charge")

    def renamed(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.step("load-invoice", lambda keys, signal: None)
        octx.step("charge-card", lambda keys, signal: "x")

    with pytest.raises(NondeterminismError, match=r"position 1 .* 'charge'.* 'charge-card'"):
        t.resume_with(renamed)
    assert t.status == "failed"


def test_resume_with_a_compatible_body_that_adds_a_step_at_the_end(
    stripe: Stripe, counts: dict[str, int]
) -> None:
    t = OrchestrationHarness(billing(stripe, counts), data={"amount": 5})
    t.run()
    old = billing(stripe, counts)

    def extended(job: Job[Any], octx: OrchestrationContext) -> None:
        old(job, octx)
        octx.step("notify", lambda keys, signal: "sent")

    assert t.resume_with(extended) == "completed"
    assert names(t)[-1] == "notify"
    assert counts["charge"] == 1


def test_a_body_that_stops_short_of_its_journal_is_nondeterministic() -> None:
    def two(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.step("a", lambda keys, signal: 1)
        octx.step("b", lambda keys, signal: 2)

    t = OrchestrationHarness(two)
    t.run()
    with pytest.raises(NondeterminismError, match="journal holds 1 more"):
        t.resume_with(lambda job, octx: octx.step("a", lambda keys, signal: 1))


def test_a_sleep_where_the_journal_has_a_step_is_nondeterministic() -> None:
    t = OrchestrationHarness(lambda job, octx: octx.step("a", lambda keys, signal: 1))
    t.run()
    with pytest.raises(NondeterminismError, match=r"holds step 'a'.*asked for sleep 'a'"):
        t.resume_with(lambda job, octx: octx.sleep("a", 5))


def test_a_body_that_catches_nondeterminism_still_fails_with_it() -> None:
    t = OrchestrationHarness(lambda job, octx: octx.step("a", lambda keys, signal: 1))
    t.run()

    def stubborn(job: Job[Any], octx: OrchestrationContext) -> None:
        try:
            octx.step("b", lambda keys, signal: 1)
        except NondeterminismError:
            raise ValueError("ignored it") from None

    with pytest.raises(NondeterminismError):
        t.resume_with(stubborn)


# -- now() and uuid() -------------------------------------------------------------------------


def test_now_and_uuid_are_stable_across_resumes_and_deterministic_by_default() -> None:
    seen: list[tuple[datetime, str, str]] = []

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        seen.append((octx.now(), octx.uuid("order"), octx.uuid("invoice")))
        octx.step("a", lambda keys, signal: 1)

    clock = FakeClock()
    t = OrchestrationHarness(body, clock=clock)
    t.crash_before("a")
    clock.advance(3600)
    t.resume()
    assert seen[0] == seen[1]
    now, order, invoice = seen[0]
    assert now == datetime(2030, 1, 1, tzinfo=timezone.utc)
    assert order != invoice
    again: list[tuple[datetime, str, str]] = []
    OrchestrationHarness(lambda job, octx: again.append((octx.now(), octx.uuid("order"), ""))).run()
    assert again[0][:2] == (now, order)


def test_now_is_frozen_at_the_attempt_that_first_journaled() -> None:
    seen: list[datetime] = []

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.step("a", lambda keys, signal: 1)
        seen.append(octx.now())

    clock = FakeClock()
    t = OrchestrationHarness(body, clock=clock)
    start = clock.now()
    t.crash_after("a")
    clock.advance(60)
    t.resume()
    assert seen == [start]


def test_a_different_seed_gives_different_uuids() -> None:
    ids: list[str] = []
    body = lambda job, octx: ids.append(octx.uuid("x"))  # noqa: E731
    OrchestrationHarness(body).run()
    OrchestrationHarness(body, seed="other").run()
    assert ids[0] != ids[1]


# -- storable results and the budget ----------------------------------------------------------


def test_an_unstorable_step_result_fails_with_a_type_error_at_append() -> None:
    t = OrchestrationHarness(lambda job, octx: octx.step("obj", lambda keys, signal: object()))
    with pytest.raises(TypeError, match=r"result of step 'obj'.*object is not storable"):
        t.run()
    assert isinstance(t.error, StepResultError)
    assert t.steps == []


def test_results_come_back_as_a_store_returns_them_on_the_first_run_too() -> None:
    got: list[Any] = []

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        got.append(octx.step("t", lambda keys, signal: (1, 2)))
        got.append(octx.step("d", lambda k, s: datetime(2030, 1, 1, 0, 0, 0, 123456, timezone.utc)))

    t = OrchestrationHarness(body)
    t.run()
    t.resume()
    assert got[0] == got[2] == [1, 2]
    assert got[1] == got[3] == datetime(2030, 1, 1, 0, 0, 0, 123000, timezone.utc)


def test_a_journal_past_its_budget_raises_journal_too_large_naming_the_step() -> None:
    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.step("small", lambda keys, signal: "x" * 100)
        octx.step("big", lambda keys, signal: "x" * 5000)

    t = OrchestrationHarness(body, max_journal_bytes=2000)
    with pytest.raises(JournalTooLarge) as caught:
        t.run()
    assert caught.value.step == "big"
    assert caught.value.size > caught.value.budget == 2000
    assert names(t) == ["small"]


def test_the_job_data_shares_the_journal_budget() -> None:
    data = {"blob": b"\0" * (MAX_PAYLOAD_BYTES - 1000)}
    t = OrchestrationHarness(lambda job, octx: octx.step("s", lambda k, s: "y" * 2000), data)
    with pytest.raises(JournalTooLarge) as caught:
        t.run()
    assert caught.value.budget < 1000


def test_logs_are_bounded_and_not_journaled() -> None:
    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        for n in range(MAX_LOG_ENTRIES + 5):
            octx.log(f"line {n}")
        octx.log("x" * (MAX_LOG_MESSAGE_BYTES * 2))

    t = OrchestrationHarness(body, max_journal_bytes=100)
    assert t.run() == "completed"
    assert len(t.logs) == MAX_LOG_ENTRIES
    assert t.logs[-1].endswith("[truncated]")
    assert t.journal == []


# -- fatal errors -----------------------------------------------------------------------------


def test_non_retryable_propagates_as_a_fatal_job_error() -> None:
    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        sub = octx.step("load", lambda keys, signal: {"status": "active"})
        if sub["status"] == "active":
            raise NonRetryable(f"bad state: {sub['status']}")

    t = OrchestrationHarness(body)
    with pytest.raises(NonRetryable, match="bad state: active"):
        t.run()
    assert isinstance(t.error, FatalJobError)


# -- sleep ------------------------------------------------------------------------------------


def sleeper(log: list[str]) -> Any:
    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.step("welcome", lambda keys, signal: log.append("welcome"))
        octx.sleep("three-days", timedelta(days=3))
        octx.step("follow-up", lambda keys, signal: log.append("follow-up"))

    return body


def test_sleep_ends_the_attempt_and_resume_elapses_it() -> None:
    log: list[str] = []
    clock = FakeClock()
    t = OrchestrationHarness(sleeper(log), clock=clock)
    start = clock.now()
    assert t.run() == "sleeping"
    assert t.wake_at == start + timedelta(days=3)
    assert log == ["welcome"]
    assert t.resume() == "completed"
    assert clock.now() == start + timedelta(days=3)
    assert log == ["welcome", "follow-up"]
    assert t.attempts == 1  # waking from a sleep is not an attempt
    assert [(s.name, s.kind) for s in t.steps] == [
        ("welcome", "step"),
        ("three-days", "sleep"),
        ("follow-up", "step"),
    ]
    assert t.steps[1].wake_at == t.steps[1].at + timedelta(days=3)  # type: ignore[operator]


def test_woken_early_the_body_sleeps_again_until_the_original_wake_time() -> None:
    log: list[str] = []
    clock = FakeClock()
    t = OrchestrationHarness(sleeper(log), clock=clock)
    t.run()
    wake = t.wake_at
    clock.advance(timedelta(days=1))
    assert t.resume(elapse_sleep=False) == "sleeping"
    assert t.wake_at == wake
    assert log == ["welcome"]
    assert t.resume() == "completed"


def test_a_body_that_swallows_the_suspension_still_sleeps() -> None:
    ran: list[str] = []

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        try:
            octx.sleep("nap", 60)
        except Exception:
            pass
        octx.step("after", lambda keys, signal: ran.append("after"))

    t = OrchestrationHarness(body)
    assert t.run() == "sleeping"
    assert ran == []


def test_sleep_of_zero_does_not_suspend() -> None:
    t = OrchestrationHarness(lambda job, octx: octx.sleep("none", 0))
    assert t.run() == "completed"
    assert [s.kind for s in t.steps] == ["sleep"]


# -- timeouts ---------------------------------------------------------------------------------


def test_a_step_past_its_timeout_aborts_the_run_at_the_next_step() -> None:
    clock = FakeClock()
    seen: list[str | None] = []

    def slow(keys: StepKeys, signal: AbortSignal) -> str:
        clock.advance(11)
        seen.append(signal.reason)
        return "late"

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.step("slow", slow, timeout=10)
        octx.step("next", lambda keys, signal: "never")

    t = OrchestrationHarness(body, clock=clock)
    with pytest.raises(JobAborted, match="step-timeout: step 'slow' ran longer than 10 s"):
        t.run()
    assert seen == ["step-timeout: step 'slow' ran longer than 10 s"]
    assert names(t) == ["slow"]  # a late result is still journaled (fenced in production)
    assert t.resume() == "completed"


def test_max_duration_aborts_the_run() -> None:
    clock = FakeClock()

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.step("a", lambda keys, signal: clock.advance(40) and None)
        octx.step("b", lambda keys, signal: None)

    t = OrchestrationHarness(body, clock=clock, max_duration=30)
    with pytest.raises(JobAborted, match="max-duration"):
        t.run()
    assert names(t) == ["a"]


def test_the_signal_is_the_run_signal_and_heartbeat_reports_it() -> None:
    seen: list[Any] = []

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        seen.append(octx.heartbeat())
        octx.step("s", lambda keys, signal: seen.append(signal is octx.signal))

    OrchestrationHarness(body).run()
    assert seen == ["heartbeated", True]


def test_harness_rejects_unstorable_data() -> None:
    with pytest.raises(TypeError, match="job data"):
        OrchestrationHarness(lambda job, octx: None, data={"x": object()})


def test_a_body_that_swallows_a_refused_step_is_not_completed() -> None:
    clock = FakeClock()
    charged: list[str] = []

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.step("slow", lambda keys, signal: clock.advance(40) and None)
        try:
            octx.step("charge", lambda keys, signal: charged.append("charged"))
        except JobAborted:
            pass  # a careless body carries on and returns

    t = OrchestrationHarness(body, clock=clock, max_duration=30)
    with pytest.raises(JobAborted, match="max-duration"):
        t.run()
    assert t.status != "completed" and charged == []


def test_async_bodies_are_refused_at_declaration() -> None:
    from durabl.orchestrator import OrchestrationHandler

    async def body(job: Any, octx: Any) -> None:
        return None

    with pytest.raises(TypeError, match="async"):
        OrchestrationHandler(body)


def test_a_step_result_outside_the_utc_range_is_refused_when_journaled() -> None:
    far = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5)))

    def body(job: Any, octx: Any) -> None:
        octx.step("far", lambda keys, signal: far)

    harness = OrchestrationHarness(body)
    with pytest.raises(TypeError):
        harness.run()


def test_snooze_in_a_body_sleeps_in_the_harness_without_an_attempt() -> None:
    clock = FakeClock()
    tries: list[int] = []

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        tries.append(job.attempts)
        if len(tries) == 1:
            raise durabl.Snooze(timedelta(minutes=5))

    t = OrchestrationHarness(body, clock=clock)
    start = clock.now()
    assert t.run() == "sleeping"
    assert t.wake_at == start + timedelta(minutes=5)
    assert t.resume() == "completed"
    assert tries == [1, 1] and t.attempts == 1


# -- sleep_until ------------------------------------------------------------------------------


def test_sleep_until_sleeps_to_the_instant_and_continues_after_it() -> None:
    log: list[str] = []
    clock = FakeClock(datetime(2026, 12, 20, 9, 30, tzinfo=timezone.utc))
    christmas_eve = datetime(2026, 12, 24, 1, 0, tzinfo=timezone(timedelta(hours=1)))

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.sleep_until("until-christmas-eve", christmas_eve)
        octx.step("greet", lambda keys, signal: log.append("greet"))

    t = OrchestrationHarness(body, clock=clock)
    assert t.run() == "sleeping"
    assert t.wake_at == datetime(2026, 12, 24, tzinfo=timezone.utc)
    assert log == []
    assert t.resume() == "completed"
    assert log == ["greet"] and t.attempts == 1
    assert [(s.name, s.kind) for s in t.steps] == [
        ("until-christmas-eve", "sleep"),
        ("greet", "step"),
    ]


def test_sleep_until_an_instant_already_past_continues_at_once() -> None:
    clock = FakeClock(datetime(2027, 1, 1, tzinfo=timezone.utc))
    t = OrchestrationHarness(
        lambda job, octx: octx.sleep_until("late", datetime(2026, 1, 1, tzinfo=timezone.utc)),
        clock=clock,
    )
    assert t.run() == "completed"
    assert [s.kind for s in t.steps] == ["sleep"]


def test_sleep_until_refuses_a_naive_datetime_or_another_type() -> None:
    naive = OrchestrationHarness(lambda job, octx: octx.sleep_until("n", datetime(2026, 12, 24)))
    with pytest.raises(ValueError, match="timezone-aware"):
        naive.run()
    assert naive.steps == []
    wrong = OrchestrationHarness(lambda job, octx: octx.sleep_until("n", "2026-12-24"))
    with pytest.raises(TypeError, match="must be a datetime"):
        wrong.run()


# -- send_event -------------------------------------------------------------------------------


def invoicing(after: list[str]) -> Any:
    def body(job: Job[Any], octx: OrchestrationContext) -> list[str]:
        ids = octx.send_event("sync", "billing/invoice.sync", {"invoice_id": job.data["id"]})
        octx.step("after", lambda keys, signal: after.append("after"))
        return ids

    return body


def test_send_event_records_each_event_once_and_journals_the_ids() -> None:
    after: list[str] = []
    t = OrchestrationHarness(
        invoicing(after),
        {"id": 7},
        subscriptions={"billing/invoice.sync": ["sync-invoice", "mail-invoice"]},
    )
    assert t.run() == "completed"
    assert t.sent_events == [("billing/invoice.sync", {"invoice_id": 7})]
    assert t.steps[0].name == "sync" and t.steps[0].result == ["sync-invoice-1", "mail-invoice-2"]


@pytest.mark.parametrize("crash", ["crash_before", "crash_after"])
def test_a_crash_around_send_event_does_not_send_it_twice(crash: str) -> None:
    after: list[str] = []
    t = OrchestrationHarness(
        invoicing(after), {"id": 7}, subscriptions={"billing/invoice.sync": ["sync-invoice"]}
    )
    assert getattr(t, crash)("sync") == "crashed"
    assert t.resume() == "completed"
    assert t.sent_events == [("billing/invoice.sync", {"invoice_id": 7})]
    assert t.steps[0].result == ["sync-invoice-1"] and after == ["after"]


def test_send_event_refuses_a_bad_event_or_data_before_sending() -> None:
    bad_name = OrchestrationHarness(lambda job, octx: octx.send_event("s", ""))
    with pytest.raises(ValueError, match="event"):
        bad_name.run()
    bad_data = OrchestrationHarness(lambda job, octx: octx.send_event("s", "e", {"x": object()}))
    with pytest.raises(TypeError):
        bad_data.run()
    assert bad_name.sent_events == bad_data.sent_events == []


def test_send_event_in_a_loop_sends_at_every_step_of_the_loop() -> None:
    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        for n in range(3):
            octx.send_event("remind", "crm/reminder", {"n": n})

    t = OrchestrationHarness(body, subscriptions={"crm/reminder": ["remind"]})
    assert t.run() == "completed"
    assert t.sent_events == [("crm/reminder", {"n": n}) for n in range(3)]
    assert [s.result for s in t.steps] == [["remind-1"], ["remind-2"], ["remind-3"]]
