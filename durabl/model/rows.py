"""A job as the SQL stores (SQLite, PostgreSQL) keep it: one row whose columns are named
as :class:`durabl.model.job.Job`'s fields, the payload and the journal in tagged JSON
(:mod:`durabl.model.tagged_json`). Each store reads its own instants (SQLite: epoch
milliseconds; PostgreSQL: ``timestamptz``) and its own logs; the rest of the mapping is
here, once."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from durabl.model.attempts import Attempt, attempt_from_record
from durabl.model.job import Job, LogEntry, job_from_fields
from durabl.model.tagged_json import decode_payload, encode_payload, from_ms


class Row(Protocol):
    """A row read by column name (``sqlite3.Row``, a psycopg dict row)."""

    def __getitem__(self, column: str, /) -> Any: ...


def encode_journal(records: Sequence[Any]) -> str:
    """A JSON array of journal records."""
    return encode_payload(list(records))


def decode_journal(text: str | None) -> tuple[dict[str, Any], ...]:
    """The journal column (NULL until the first append) as a tuple of entries."""
    return () if text is None else tuple(decode_payload(text))


def decode_attempts(value: Any) -> tuple[Attempt, ...]:
    """The ``attempt_history`` column: a JSON array (text, or already parsed) of the
    records :func:`durabl.model.job.attempt_from_record` reads, instants in epoch
    milliseconds; NULL (a job written before the column existed) is no history."""
    if value is None:
        return ()
    records = json.loads(value) if isinstance(value, (str, bytes)) else value
    return tuple(attempt_from_record(r, from_ms) for r in records)


def encode_trace_context(value: Mapping[str, str] | None) -> str | None:
    """The ``trace_context`` column: a JSON object of strings, NULL for none."""
    return None if not value else json.dumps(dict(value), separators=(",", ":"), sort_keys=True)


def decode_trace_context(value: Any) -> dict[str, str] | None:
    """The ``trace_context`` column back (text, or already parsed); NULL is None."""
    if value is None:
        return None
    found = json.loads(value) if isinstance(value, (str, bytes)) else value
    return {str(k): str(v) for k, v in found.items()} or None


def job_from_row(
    row: Row, *, instant: Callable[[Any], datetime], logs: Iterable[LogEntry]
) -> Job[Any]:
    """The job a row holds; ``instant`` reads the store's instant columns.

    Every claim reads one, so the fields are one dict literal (no loops over column
    lists, no generator per group of columns)."""
    beat = row["heartbeat_at"]
    finished = row["finished_at"]
    stored = row["result"]
    history = row["attempt_history"]
    journal = row["journal"]
    return job_from_fields(
        {
            "id": row["id"],
            "type": row["type"],
            "data": decode_payload(row["data"]),
            "status": row["status"],
            "priority": row["priority"],
            "run_at": instant(row["run_at"]),
            "attempts": row["attempts"],
            "max_attempts": row["max_attempts"],
            "dedupe_key": row["dedupe_key"],
            "dedupe_scope": row["dedupe_scope"],
            "concurrency_key": row["concurrency_key"],
            "concurrency_limit": row["concurrency_limit"],
            "created_at": instant(row["created_at"]),
            "updated_at": instant(row["updated_at"]),
            "finished_at": None if finished is None else instant(finished),
            "fail_reason": row["fail_reason"],
            "failure_kind": row["failure_kind"],
            "logs": tuple(logs),
            "backoff": row["backoff"],
            "backoff_delay": float(row["backoff_delay"]),
            "backoff_max_delay": float(row["backoff_max_delay"]),
            "journal": () if journal is None else tuple(decode_payload(journal)),
            "attempt_history": () if history is None else decode_attempts(history),
            "worker": row["lease_owner"],
            "heartbeat_at": None if beat is None else instant(beat),
            "lease_expires_at": None,
            "result": None if stored is None else decode_payload(stored),
            "trace_context": decode_trace_context(row["trace_context"]),
            "timeout": row["timeout"],
            "parent_id": row["parent_id"],
            "parent_step": row["parent_step"],
        }
    )
