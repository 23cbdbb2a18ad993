"""The notifications PostgreSQL's statements send (:mod:`durabl.stores.postgres.sql`),
inside the write's own transaction, so that they fire at commit and never for a
rolled-back write; :mod:`durabl.stores.postgres.listener` routes them. Each is a
``'<ms until due>:<type>'`` payload on the table's channel (``{channel}``): a job became
pending, or a slot of a concurrency key was freed and a job held back on it may start.
"""

from __future__ import annotations


def notify(rows: str) -> str:
    """The NOTIFY a write sends for each job it made pending (``rows``: the CTE holding
    their ``type`` and ``run_at``): the payload is ``<ms until run_at, 0 if due>:<type>``
    (under 300 bytes: types are at most 255)."""
    return (
        f"pg_notify({{channel}}, greatest(0, ceil(extract(epoch FROM {rows}.run_at - {{now}}) "
        f"* 1000))::bigint::text || ':' || {rows}.type)"
    )


# A job leaving ``active`` frees its concurrency key's slot, and no other write announces
# that: the jobs held back on the key would wait for the next poll. So each write that ends
# an active run (completion, failure, retry, release, cancellation, reaping) also notifies
# the types with a due job pending on a key it freed, as if that job had just been enqueued
# (``0:<type>``). The types of a key are found by a loose scan of the flow-control index
# (key, status, type, ...): one probe per type, however many jobs wait. A job without a key
# adds no read.
def ends_runs(ended: str, statement: str) -> str:
    """``WITH RECURSIVE <ended> AS (<statement>), waiting AS (...)``: ``statement`` ends
    active runs and returns their ``concurrency_key``; ``waiting`` holds each freed key
    with each type that has pending jobs on it. Follow it with a SELECT from ``ended``
    filtered by :data:`NOTIFY_WAITING`."""
    return (
        f"WITH RECURSIVE {ended} AS ({statement}), "
        "waiting(k, type) AS ("
        "SELECT e.k, (SELECT min(p.type) FROM {jobs} AS p "
        "WHERE p.concurrency_key = e.k AND p.status = 'pending') "
        f"FROM (SELECT DISTINCT concurrency_key AS k FROM {ended} "
        "WHERE concurrency_key IS NOT NULL) AS e "
        "UNION ALL SELECT w.k, (SELECT min(p.type) FROM {jobs} AS p "
        "WHERE p.concurrency_key = w.k AND p.status = 'pending' AND p.type > w.type) "
        "FROM waiting AS w WHERE w.type IS NOT NULL) "
    )


NOTIFY_WAITING = (
    "(SELECT count(pg_notify({channel}, '0:' || w.type)) FROM waiting AS w "
    "WHERE w.type IS NOT NULL AND EXISTS (SELECT 1 FROM {jobs} AS d "
    "WHERE d.concurrency_key = w.k AND d.status = 'pending' AND d.type = w.type "
    "AND d.run_at <= {now})) >= 0"
)
"""Sends the notifications of :func:`ends_runs`'s ``waiting`` (a condition that always
holds, so that the statement's own rows come back unchanged)."""
