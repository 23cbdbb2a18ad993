"""The indexes every query needs, created idempotently."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pymongo import IndexModel
from pymongo.collection import Collection

from durabl.model.exceptions import DurablError
from durabl.stores.mongo.codec import ACTIVE_SLOT, LIVE_SLOT, PENDING_SLOT
from durabl.stores.mongo.flow import slot_index_options


@dataclass(frozen=True)
class IndexSpec:
    name: str
    keys: list[tuple[str, int]]
    options: dict[str, Any] = field(default_factory=dict)


def _slot(name: str, slot: str) -> IndexSpec:
    return IndexSpec(
        name,
        [(slot, 1)],
        {"unique": True, "partialFilterExpression": {slot: {"$exists": True}}},
    )


INDEXES: tuple[IndexSpec, ...] = (
    # The claim: equality on type, sort by priority then run_at, range on run_at, only
    # over pending jobs.
    IndexSpec(
        "durabl_claim",
        [("type", 1), ("priority", 1), ("run_at", 1), ("_id", 1)],
        {"partialFilterExpression": {"status": "pending"}},
    ),
    # The reaper: active jobs by last renewal.
    IndexSpec(
        "durabl_lease",
        [("heartbeat_at", 1)],
        {"partialFilterExpression": {"status": "active"}},
    ),
    # Dedupe: one slot per kind of exclusion, set only while the job holds it.
    _slot("durabl_dedupe_live", LIVE_SLOT),
    _slot("durabl_dedupe_pending", PENDING_SLOT),
    _slot("durabl_dedupe_active", ACTIVE_SLOT),
    # Flow control (durabl.stores.mongo.flow): a key's slots are exclusive among active
    # jobs; the claim counts each key's active jobs.
    IndexSpec("durabl_concurrency_slot", [("concurrency_slot", 1)], slot_index_options()),
    IndexSpec(
        "durabl_concurrency",
        [("concurrency_key", 1), ("status", 1)],
        {"partialFilterExpression": {"concurrency_key": {"$exists": True}}},
    ),
    # The reaper's sweep of schedule tick copies left held (durabl.stores.mongo.schedules).
    IndexSpec(
        "durabl_schedule_hold",
        [("schedule_hold", 1)],
        {"partialFilterExpression": {"schedule_hold": {"$exists": True}}},
    ),
    # Stats per type and status; oldest due pending job per type.
    IndexSpec("durabl_type_status", [("type", 1), ("status", 1), ("run_at", 1)]),
    # Failed jobs newest first; counts by status across types.
    IndexSpec("durabl_status_finished", [("status", 1), ("finished_at", -1)]),
    # Every list of one status in its own order (newest finish, then newest: just newest
    # for the pending and active jobs, whose finish is unset), the newest jobs a search
    # walks, and a sort by finish time (INDEXED_ORDERS), read in index order at any
    # length instead of sorted; then the pending list by due time. The first also serves
    # what durabl_status_finished does; that one stays, as deployments have it.
    IndexSpec("durabl_status_finished_newest", [("status", 1), ("finished_at", -1), ("_id", -1)]),
    IndexSpec(
        "durabl_pending_run_at",
        [("run_at", 1), ("_id", -1)],
        {"partialFilterExpression": {"status": "pending"}},
    ),
    # A parent's children by status (a gather, the wake of its waiting parent, a cancel's
    # cascade), over child jobs only.
    IndexSpec(
        "durabl_parent",
        [("parent_id", 1), ("status", 1), ("_id", -1)],
        {"partialFilterExpression": {"parent_id": {"$exists": True}}},
    ),
    # A search by the start of a dedupe key (an anchored regex is an index range).
    IndexSpec(
        "durabl_dedupe_key",
        [("dedupe_key", 1)],
        {"partialFilterExpression": {"dedupe_key": {"$exists": True}}},
    ),
)


def ensure_indexes(
    col: Collection[dict[str, Any]],
    create: Callable[[Collection[dict[str, Any]], list[IndexSpec]], None],
) -> None:
    """Create what is missing with ``create`` (the store's calls: one ``createIndexes``
    command on a server). An index of ours with another definition is an error to fix by
    hand, never silently dropped (it may be in use)."""
    existing = col.index_information()
    for spec in INDEXES:
        if spec.name in existing and not _same_keys(existing[spec.name], spec):
            raise DurablError(
                f"index {spec.name!r} on {col.full_name} has keys {existing[spec.name]['key']}, "
                f"expected {spec.keys}; drop it so startup() can recreate it"
            )
    missing = [spec for spec in INDEXES if spec.name not in existing]
    if missing:
        create(col, missing)


def index_models(specs: list[IndexSpec]) -> list[IndexModel]:
    """``specs`` as pymongo builds a ``createIndexes`` command of them."""
    return [IndexModel(spec.keys, name=spec.name, **spec.options) for spec in specs]


def missing_indexes(col: Collection[dict[str, Any]]) -> list[str]:
    """The names of our indexes ``col`` lacks, read without creating any (an index of ours
    with other keys counts as missing: ``startup()`` refuses it until it is dropped)."""
    existing = col.index_information()
    return [
        spec.name
        for spec in INDEXES
        if spec.name not in existing or not _same_keys(existing[spec.name], spec)
    ]


def _same_keys(found: dict[str, Any], spec: IndexSpec) -> bool:
    return [tuple(k) for k in found["key"]] == [tuple(k) for k in spec.keys]
