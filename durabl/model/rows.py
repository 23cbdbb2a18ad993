"""A job as the SQL stores (SQLite, PostgreSQL) keep it: one row whose columns are named
as :class:`durabl.model.job.Job`'s fields, the payload and the journal in tagged JSON
(:mod:`durabl.model.tagged_json`). Each store reads its own instants (SQLite: epoch
milliseconds; PostgreSQL: ``timestamptz``) and its own logs; the rest of the mapping is
here, once."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol

from durabl.model.job import Attempt, Job, LogEntry, attempt_from_record, job_from_fields
from durabl.model.tagged_json import decode_payload, encode_payload, from_ms


class Row(Protocol):
    """A row read by column name (``sqlite3.Row``, a psycopg dict row)."""

    def __getitem__(self, column: str, /) -> Any: ...


#: Columns read back as they are stored.
PLAIN_COLUMNS = (
    "id",
    "type",
    "status",
    "priority",
    "attempts",
    "max_attempts",
    "dedupe_key",
    "dedupe_scope",
    "fail_reason",
    "failure_kind",
    "backoff",
)
#: Columns that hold an instant, in the store's own form.
INSTANT_COLUMNS = ("run_at", "created_at", "updated_at")
#: Columns of seconds, stored as numbers of any kind and read back as floats.
SECONDS_COLUMNS = ("backoff_delay", "backoff_max_delay")


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


def job_from_row(
    row: Row, *, instant: Callable[[Any], datetime], logs: Iterable[LogEntry]
) -> Job[Any]:
    """The job a row holds; ``instant`` reads the store's instant columns."""
    fields: dict[str, Any] = {name: row[name] for name in PLAIN_COLUMNS}
    fields.update((name, instant(row[name])) for name in INSTANT_COLUMNS)
    fields.update((name, float(row[name])) for name in SECONDS_COLUMNS)
    fields["data"] = decode_payload(row["data"])
    fields["journal"] = decode_journal(row["journal"])
    fields["logs"] = tuple(logs)
    fields["attempt_history"] = decode_attempts(row["attempt_history"])
    fields["worker"] = row["lease_owner"]
    beat = row["heartbeat_at"]
    fields["heartbeat_at"] = None if beat is None else instant(beat)
    fields["lease_expires_at"] = None
    stored = row["result"]
    fields["result"] = None if stored is None else decode_payload(stored)
    return job_from_fields(fields)
