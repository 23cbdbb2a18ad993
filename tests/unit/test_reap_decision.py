"""reap_decision: what the reaper does with an expired lease, decided once for every store.
A cancellation request comes first, then a read-ahead refund, then the attempts left."""

from __future__ import annotations

import pytest

from durabl.model.rules import UNSTARTED_REAP_LIMIT, ReapDecision, reap_decision


def decide(
    attempts: int,
    max_attempts: int,
    *,
    reserved: bool = False,
    unstarted_reaps: int = 0,
    cancel_requested: bool = False,
) -> ReapDecision:
    return reap_decision(
        attempts,
        max_attempts,
        reserved=reserved,
        unstarted_reaps=unstarted_reaps,
        cancel_requested=cancel_requested,
    )


@pytest.mark.parametrize(
    ("attempts", "max_attempts", "reserved"),
    [(1, 1, False), (5, 5, False), (1, 5, False), (1, 1, True), (1, 5, True)],
)
def test_a_requested_cancellation_wins_whatever_attempts_remain(
    attempts: int, max_attempts: int, reserved: bool
) -> None:
    assert decide(attempts, max_attempts, reserved=reserved, cancel_requested=True) == "cancel"


def test_without_a_request_the_last_attempt_stalls_and_an_earlier_one_recovers() -> None:
    assert decide(1, 1) == "stall"
    assert decide(3, 3) == "stall"
    assert decide(1, 3) == "recover"


def test_a_reserved_claim_is_refunded_until_its_unstarted_reaps_run_out() -> None:
    assert decide(1, 1, reserved=True) == "refund"
    last = decide(1, 1, reserved=True, unstarted_reaps=UNSTARTED_REAP_LIMIT)
    assert last == "stall"
    assert decide(1, 3, reserved=True, unstarted_reaps=UNSTARTED_REAP_LIMIT) == "recover"
