"""The public entry points that take the same options write them out as plain keyword
parameters (so ``help()``, IDEs and mypy see them); these tests keep the copies equal."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import MISSING, fields
from typing import Any

import pytest

import durabl
from durabl import JobQueue
from durabl.model.declared import DeclaredOptions


def keywords(function: Callable[..., Any]) -> dict[str, Any]:
    """The keyword-only parameters of ``function`` with their defaults (the catch-all
    ``**unexpected`` left out)."""
    return {
        name: parameter.default
        for name, parameter in inspect.signature(function).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    }


DECLARED = {
    option.name: option.default if option.default is not MISSING else option.default_factory
    for option in fields(DeclaredOptions)
}


@pytest.mark.parametrize(
    "entry", [durabl.job, JobQueue.process, JobQueue.register], ids=["job", "process", "register"]
)
def test_declaring_a_type_takes_exactly_the_declared_options(entry: Callable[..., Any]) -> None:
    assert keywords(entry) == DECLARED


def test_claim_or_enqueue_takes_the_options_of_enqueue() -> None:
    assert keywords(JobQueue.claim_or_enqueue) == keywords(JobQueue.enqueue)


def test_durabl_schedule_takes_the_options_of_queue_schedule() -> None:
    declared = inspect.signature(durabl.schedule).parameters
    stored = inspect.signature(JobQueue.schedule).parameters
    assert [(p.name, p.kind, p.default) for p in declared.values()] == [
        (p.name, p.kind, p.default) for p in stored.values() if p.name != "self"
    ]
