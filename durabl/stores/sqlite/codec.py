"""Values <-> SQLite columns: payloads and journals as tagged JSON text and instants as
epoch milliseconds (both :mod:`durabl.model.tagged_json`, shared with the PostgreSQL store),
and rows back to :class:`~durabl.model.job.Job`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from durabl.model.job import Job, LogEntry, clip_text
from durabl.model.options import MAX_LOG_MESSAGE_BYTES
from durabl.model.rows import job_from_row
from durabl.model.tagged_json import (
    EPOCH,
    ceil_ms,
    decode_payload,
    encode_payload,
    from_ms,
    to_ms,
)

__all__ = ["EPOCH", "ceil_ms", "decode_payload", "encode_payload", "from_ms", "to_ms"]


# -- rows -------------------------------------------------------------------------------------
def log_rows(job_id: str, first_seq: int, logs: Sequence[LogEntry]) -> list[tuple[Any, ...]]:
    """Rows for ``durabl_logs``, numbered from ``first_seq``; messages clipped."""
    return [
        (job_id, first_seq + n, to_ms(entry.at), clip_text(entry.message, MAX_LOG_MESSAGE_BYTES))
        for n, entry in enumerate(logs)
    ]


def to_job(row: sqlite3.Row, logs: Iterable[LogEntry] = ()) -> Job[Any]:
    return job_from_row(row, instant=from_ms, logs=logs)


def to_log(row: sqlite3.Row) -> LogEntry:
    return LogEntry(from_ms(row["at"]), row["message"])
