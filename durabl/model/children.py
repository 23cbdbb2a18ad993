"""Child jobs: the rules of ``octx.start_children`` and ``octx.gather``. Pure: no I/O.

A child carries its parent's id (``Job.parent_id``) and its place among the children one
step started (``Job.parent_step``, ``"<step>#<index>"``). That place is what makes a
start exactly once: a run that crashed after creating some or all of a step's children and
before journaling them finds them by their parent and place, and creates only the others.

A gather journals what it returns (each child's record, :func:`child_record`), so a
resumed body gets the very same jobs back, whatever happened to the children since.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from durabl.model.bulk import Child
from durabl.model.clock import as_utc
from durabl.model.job import TERMINAL_STATUSES, Job, clip_text, job_from_fields
from durabl.model.payload import portable
from durabl.model.waiting import CHILDREN_PREFIX

#: ``Job.waiting_for`` of an orchestration waiting in ``gather("<step>", ...)``.
WAITING_PREFIX = CHILDREN_PREFIX
#: How long a waiting parent sleeps at most before it looks at its children itself, in
#: seconds. The last child's terminal write wakes it at once; this only bounds how long a
#: wake that never came (the child's process died between its write and the wake, or the
#: child ended outside a run: reaped) keeps it waiting.
GATHER_RECHECK = 600.0
#: The most of a child's failure reason a gather journals, in bytes of UTF-8 (a thousand
#: failed children must not fill the parent's journal with tracebacks).
MAX_GATHERED_REASON_BYTES = 2048
#: The journal entry a ``start_children`` step writes before it creates its first child:
#: a job whose journal holds one may have children (the only way a job gets any).
SPAWN = "spawn"
#: ``enqueue()`` options a child may not carry: a child belongs to its parent, so a
#: dedupe slot (which could leave a child uncreated, or shared with another parent) has
#: no meaning for it.
REFUSED_CHILD_OPTIONS = ("dedupe_key", "dedupe_scope", "coalesce", "debounce", "debounce_max")
#: The fields of a child that a gather journals and returns: the job but for its logs,
#: journal and attempt history (see :func:`child_record`).
GATHERED_FIELDS = (
    "id",
    "type",
    "data",
    "status",
    "priority",
    "run_at",
    "attempts",
    "max_attempts",
    "created_at",
    "updated_at",
    "finished_at",
    "fail_reason",
    "failure_kind",
    "result",
    "parent_id",
    "parent_step",
)


def waiting_for_children(step: str) -> str:
    """``Job.waiting_for`` of a job waiting in the gather ``step``."""
    return WAITING_PREFIX + step


def child_place(step: str, index: int) -> str:
    """``Job.parent_step`` of the ``index``-th child the step ``step`` started."""
    return f"{step}#{index}"


def child_index(place: str | None, step: str) -> int | None:
    """The index a child's ``parent_step`` gives it within ``step``; None for a child of
    another step."""
    prefix = step + "#"
    if place is None or not place.startswith(prefix):
        return None
    digits = place[len(prefix) :]
    return int(digits) if digits.isdigit() else None


def check_step_name(what: str, name: object) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"{what} name must be a non-empty string, got {name!r}")
    return name


def check_children(step: str, children: object) -> list[Child]:
    """``children`` as a list of :class:`Child`; ``TypeError`` for anything else,
    ``ValueError`` for a child with an option a child cannot carry."""
    if isinstance(children, (str, bytes, Mapping)) or not isinstance(children, Sequence):
        raise TypeError(
            f"start_children {step!r}: children must be a list of durabl.Child, "
            f"got {children!r:.100}"
        )
    checked: list[Child] = []
    for position, child in enumerate(children):
        if not isinstance(child, Child):
            raise TypeError(
                f"start_children {step!r}: child {position} must be a durabl.Child "
                f"(type, data, **options), got {child!r:.100}"
            )
        given = [name for name in REFUSED_CHILD_OPTIONS if getattr(child, name) is not None]
        if given:
            raise ValueError(
                f"start_children {step!r}: child {position} sets {given[0]}; a child job "
                "belongs to its parent and takes no dedupe key, coalescing or debounce"
            )
        checked.append(child)
    return checked


def check_gather_ids(step: str, ids: object) -> list[str]:
    """``ids`` as a list of job ids (str); ``TypeError`` otherwise."""
    if isinstance(ids, (str, bytes, Mapping)) or not isinstance(ids, Sequence):
        raise TypeError(f"gather {step!r}: ids must be a list of job ids, got {ids!r:.100}")
    for position, job_id in enumerate(ids):
        if not isinstance(job_id, str):
            raise TypeError(f"gather {step!r}: id {position} must be a str, got {job_id!r:.100}")
    return list(ids)


def may_have_children(job: Job[Any]) -> bool:
    """Whether ``job`` ever began a ``start_children`` step (its journal says so)."""
    return any(entry.get("kind") == SPAWN for entry in job.journal)


def is_terminal(job: Job[Any]) -> bool:
    return job.status in TERMINAL_STATUSES


def child_record(job: Job[Any]) -> dict[str, Any]:
    """What a gather journals of a terminal child: :data:`GATHERED_FIELDS`, portable,
    its failure reason clipped to :data:`MAX_GATHERED_REASON_BYTES`."""
    record = {name: getattr(job, name) for name in GATHERED_FIELDS}
    reason = record["fail_reason"]
    if isinstance(reason, str):
        record["fail_reason"] = clip_text(reason, MAX_GATHERED_REASON_BYTES)
    return dict(portable(record))


def job_of_record(record: Mapping[str, Any]) -> Job[Any]:
    """The :class:`Job` a gather returns from a journaled record (every field the record
    does not hold at its default: no logs, journal or attempt history)."""
    values = {field.name: field.default for field in _job_defaults()}
    values.update({name: record.get(name) for name in GATHERED_FIELDS})
    for name in ("run_at", "created_at", "updated_at", "finished_at"):
        value = values[name]
        values[name] = as_utc(value) if isinstance(value, datetime) else value
    return job_from_fields(values)


def _job_defaults() -> list[Any]:
    return [
        f
        for f in dataclasses.fields(Job)
        if f.name not in GATHERED_FIELDS and f.default is not dataclasses.MISSING
    ]
