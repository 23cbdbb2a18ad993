"""Rules every store applies the same way: pure functions over a job's fields, no I/O.

A store keeps what must be atomic in its own database; what a transition *means* is
decided here, once, so the stores cannot drift apart.
"""

from __future__ import annotations

from typing import Literal

STALLED_REASON = "lease expired: the worker stopped heartbeating (crashed or hung)"
"""The ``fail_reason`` of a job the reaper gave up on (failure kind ``stalled``)."""

UNSTARTED_REAP_LIMIT = 3
"""How many times a job may be reaped unstarted without using an attempt.

A job claimed ahead of a free worker (read ahead) is *reserved*: its worker records the
start in its next write, and the reaper refunds the attempt of a reserved job whose start
was never recorded, since its handler most likely never ran. The start is recorded
asynchronously (a synchronous write before every read-ahead run would cost a round trip per
job), so a job that kills its process within milliseconds of starting could go unrecorded
each time; past this many refunds the reaper charges it like any other lost run, and such
a poison job still ends ``stalled``."""

ReapDecision = Literal["refund", "recover", "stall"]


def reap_decision(
    attempts: int, max_attempts: int, *, reserved: bool, unstarted_reaps: int
) -> ReapDecision:
    """What the reaper does with an active job whose lease expired.

    ``refund``: back to pending with its attempt given back (a read-ahead claim whose handler
    never started); ``recover``: back to pending, the lost run counted; ``stall``: failed
    ``stalled``, no attempt left. (A store that cannot move the job back to pending because
    a follower holds its pending slot supersedes it instead.)"""
    if reserved and unstarted_reaps < UNSTARTED_REAP_LIMIT:
        return "refund"
    if attempts >= max_attempts:
        return "stall"
    return "recover"
