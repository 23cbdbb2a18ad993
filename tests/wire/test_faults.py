"""Every write the store makes, against the faults a replica set produces.

Each test takes one operation's conversation (:mod:`tests.wire.scripts`) and injects one
fault into its write: a reply lost (the connection drops), a state-change error of a
failover or shutdown, an error no retry fixes, or a primary that drops everything until the
retry budget runs out. The outcome must be the fault-free one, decided once: never a job
written twice, never one lost, and past the budget one ``BackendUnavailableError`` line.
"""

from __future__ import annotations

import pytest

from durabl.model.exceptions import BackendUnavailableError, DurablError
from durabl.stores.mongo.retry import RETRY_ATTEMPTS
from tests.wire.scripts import SCRIPTS, Script
from tests.wire.server import RETRYABLE_ERRORS, UNAUTHORIZED, Wire, failed, txn

pytestmark = pytest.mark.wire


@pytest.fixture(params=SCRIPTS, ids=lambda s: s.name)
def script(request: pytest.FixtureRequest, wire: Wire) -> Script:
    return request.param(wire)  # type: ignore[no-any-return]


def test_without_a_fault_the_write_is_sent_once(wire: Wire, script: Script) -> None:
    call = script.start()
    script.applied(script.write())
    script.finish()
    script.check(call.result())
    assert wire.idle()


def test_lost_reply_is_retried_by_the_driver_as_the_same_write(wire: Wire, script: Script) -> None:
    """Applied or not before the connection dropped, the driver's one retry carries the
    same session and transaction number: a primary applies it now or answers from its
    record of the first, so the write happens once."""
    call = script.start()
    script.write().hangup()
    again = wire.receives(script.command)
    assert txn(again) == txn(script.first) and txn(again)[1] is not None
    script.applied(again)
    script.finish()
    script.check(call.result())
    assert wire.idle()


@pytest.mark.parametrize("code", RETRYABLE_ERRORS.values(), ids=RETRYABLE_ERRORS.keys())
def test_state_change_error_is_retried_by_the_driver(wire: Wire, script: Script, code: int) -> None:
    call = script.start()
    failed(script.write(), code)
    again = wire.receives(script.command)
    assert txn(again) == txn(script.first)
    script.applied(again)
    script.finish()
    script.check(call.result())
    assert wire.idle()


def test_write_applied_with_both_replies_lost_is_resolved_from_the_store(
    wire: Wire, script: Script
) -> None:
    """The driver gives up after its retry; the store asks again (a new write or a read)
    and decides from what the first write left: its receipt, its _id, its claim token."""
    call = script.start()
    script.write().hangup()
    wire.receives(script.command).hangup()
    script.resolve()
    script.finish()
    script.check(call.result())
    assert wire.idle()


def test_write_lost_twice_before_it_applied_is_made_once(wire: Wire, script: Script) -> None:
    call = script.start()
    script.write().hangup()
    wire.receives(script.command).hangup()
    script.retried()
    if script.store_retries:
        script.finish()
    script.check_unapplied(call)
    assert wire.idle()


def test_error_no_retry_fixes_surfaces_at_once(wire: Wire, script: Script) -> None:
    call = script.start()
    failed(script.write(), UNAUTHORIZED)
    error = script.check_error(call)
    assert wire.idle(), "not repeated"
    if error is not None:
        assert type(error) is DurablError
        assert "\n" not in str(error) and f"error {UNAUTHORIZED}" in str(error)


def test_primary_dropping_everything_ends_in_one_unavailable_error(
    wire: Wire, script: Script
) -> None:
    call = script.start()
    refused = wire.refuse_until_done(call)
    writes = [r for r in refused if r.command_name == script.command]
    # The driver tries each write twice; the store repeats a safe one RETRY_ATTEMPTS times.
    assert len(writes) == 2 * (RETRY_ATTEMPTS if script.store_retries else 1)
    if script.name == "claim-batch":
        script.check_unapplied(call)
        return
    with pytest.raises(BackendUnavailableError) as info:
        call.result()
    message = str(info.value)
    assert message.startswith("MongoDB unavailable during ")
    assert "\n" not in message and len(message) < 300, message
