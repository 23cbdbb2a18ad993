"""How long a type's poller waits before its next claim.

Normally the poll interval, jittered so that the processes of a fleet do not poll in step.
After failed claims, a backoff: the interval doubled per failure in a row, kept between a
floor and a cap. While the store is unavailable the cap is about a second, so the first
claim after the store's return comes within about a second of it (with push pickup off
too); the failed claims themselves keep an outage from becoming a tight loop, since each
waits for the store (a connection from the pool, a server selection) before it fails, and
the floor covers a store that fails at once.
"""

from __future__ import annotations

POLL_JITTER = 0.2
"""Each poll interval is the interval +/- 20 %; each backoff is shortened by up to 20 %."""
ERROR_BACKOFF_MIN = 0.1
"""The shortest wait after a failed claim: a store that fails at once (a connection
refused) is not asked again in a tight loop."""
UNAVAILABLE_BACKOFF_MAX = 1.0
"""The longest wait after a claim failed with the store unavailable, before jitter: the
next claim comes within about a second of the store's return. A longer wait would add
nothing but delay: each failed claim has already waited for the store before it failed."""
ERROR_BACKOFF_MAX = 30.0
"""The longest wait after a claim failed otherwise (the store refused it: a missing
permission, a bug): asking again soon would not help."""


def next_poll_wait(interval: float, errors: int, unavailable: bool, rand: float) -> float:
    """Seconds until the next claim of a poller polling every ``interval`` seconds, after
    ``errors`` failed claims in a row (the last one with the store ``unavailable``);
    ``rand`` is a random number in [0, 1)."""
    if not errors:
        return interval * (1 - POLL_JITTER + 2 * POLL_JITTER * rand)
    cap = UNAVAILABLE_BACKOFF_MAX if unavailable else ERROR_BACKOFF_MAX
    backoff = interval * 2.0 ** min(errors, 16)
    return min(max(backoff, ERROR_BACKOFF_MIN), cap) * (1 - POLL_JITTER * rand)
