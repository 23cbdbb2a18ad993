"""Helpers shared by the contract suite: enqueue with options, claim one, read a job back.

Everything here goes through the Backend protocol only, so a helper never hides a store's
behaviour from the tests that use it.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from durabl import MemoryBackend, MongoJobQueue
from durabl.model.job import Job, JobHandle
from durabl.model.options import build_new_job
from durabl.stores.base import Backend
from durabl.testing import FakeClock

VT = 30.0
"""The visibility timeout the reaper tests use."""


def enqueue(backend: Backend, type: str = "t", data: Any = None, **options: Any) -> str | None:
    """``backend.enqueue`` with the options ``JobQueue.enqueue`` takes; the new id or None."""
    new = build_new_job(type, {} if data is None else data, now=backend.now(), **options)
    return backend.enqueue(new).job_id


def enqueue_id(backend: Backend, type: str = "t", data: Any = None, **options: Any) -> str:
    """Enqueue and insist that a job was created."""
    job_id = enqueue(backend, type, data, **options)
    assert job_id is not None, "expected a new job, the dedupe slot was taken"
    return job_id


def claim_one(backend: Backend, type: str = "t") -> JobHandle[Any]:
    """Claim exactly one job of ``type``."""
    handles = backend.claim(type, limit=1, lease_owner="contract")
    assert len(handles) == 1, f"expected one claim of {type!r}, got {len(handles)}"
    return handles[0]


def get(backend: Backend, job_id: str) -> Job[Any]:
    job = backend.get_job(job_id)
    assert job is not None, f"job {job_id} is gone"
    return job


def status(backend: Backend, job_id: str) -> str:
    return get(backend, job_id).status


def expire_leases(clock: FakeClock, backend: Backend, vt: float = VT) -> None:
    """Move the clock past every lease the reaper would check with timeout ``vt``."""
    clock.advance(vt + getattr(backend, "clock_skew_allowance", 0) + 1)


def second_view(backend: Backend, clock: FakeClock) -> Backend:
    """Another backend object over the same store (another process, in effect); the same
    object for a store that lives inside one object."""
    view: Backend
    if isinstance(backend, MongoJobQueue):
        view = MongoJobQueue(backend.db, backend.collection_name, clock=clock)
    elif isinstance(path := getattr(backend, "path", None), str):  # a file store (SQLite)
        view = type(backend)(path, clock=clock)  # type: ignore[call-arg]
    elif isinstance(table := getattr(backend, "table", None), str):  # PostgreSQL tables
        view = type(backend)(backend.url, table=table, clock=clock)  # type: ignore[attr-defined,call-arg]
    else:
        return backend
    OPEN_VIEWS.append(view)
    return view


OPEN_VIEWS: list[Backend] = []
"""The views :func:`second_view` made; the contract suite's conftest closes them after each
test (a PostgreSQL view holds a connection pool and its threads)."""


def close_views() -> None:
    while OPEN_VIEWS:
        OPEN_VIEWS.pop().close()


def unstarted_sibling(backend: Backend, clock: FakeClock) -> Backend:
    """A backend of the same kind over an empty store of its own, not yet started."""
    if isinstance(backend, MongoJobQueue):
        return MongoJobQueue(backend.db, "durabl_jobs_unstarted", clock=clock)
    if isinstance(backend, MemoryBackend):
        return MemoryBackend(clock=clock)
    path = getattr(backend, "path", None)
    if isinstance(path, str):
        directory, name = os.path.split(path)
        return type(backend)(os.path.join(directory, f"unstarted-{name}"), clock=clock)  # type: ignore[call-arg]
    table = getattr(backend, "table", None)
    if isinstance(table, str):
        return type(backend)(backend.url, table=f"{table}_u", clock=clock)  # type: ignore[attr-defined,call-arg]
    pytest.skip(f"no way to make a second store like {backend!r}")
