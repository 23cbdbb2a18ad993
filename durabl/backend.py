"""The Backend protocol, now at ``durabl.stores.base``; kept so that custom stores written
against ``durabl.backend`` go on working."""

from __future__ import annotations

from durabl.stores.base import (
    Backend,
    ClaimSource,
    Completion,
    EnqueueResult,
    InlineClaimResult,
    PushListener,
    PushSource,
    PushStatus,
    PushWatcher,
)

__all__ = [
    "EnqueueResult",
    "Completion",
    "InlineClaimResult",
    "Backend",
    "ClaimSource",
    "PushStatus",
    "PushListener",
    "PushWatcher",
    "PushSource",
]
