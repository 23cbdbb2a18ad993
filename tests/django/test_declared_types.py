"""``@durabl_django.job`` declares into durabl's own registry: the options of
``@durabl.job`` (schema, enqueue defaults, dead-letter hook) apply to the configured queue."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pydantic
import pytest

import durabl
import durabl_django
from durabl import JobQueue, PayloadValidationError
from durabl.runtime.declared import registry as durabl_registry
from durabl_django.registry import registry


class Signup(pydantic.BaseModel):
    email: str
    plan: str = "free"


@pytest.fixture
def declared() -> Iterator[None]:
    """Forget what a test declares, in both registries."""
    specs = dict(registry._specs)
    yield
    for type in set(registry._specs) - set(specs):
        durabl_registry.remove(type)
    registry._specs = specs


def test_a_django_declaration_is_a_durabl_declaration(queue: JobQueue, declared: None) -> None:
    seen: list[Any] = []

    @durabl_django.job("dj-signup", schema=Signup, max_attempts=7)
    def signup(job: durabl.Job[Signup], ctx: durabl.JobContext) -> None:
        seen.append(job.data)

    assert "dj-signup" in durabl.declared_types()
    with pytest.raises(PayloadValidationError):
        durabl_django.enqueue("dj-signup", {"plan": "pro"})
    assert queue.count_jobs(type="dj-signup") == 0
    job_id = durabl_django.enqueue("dj-signup", {"email": "ada@example.com"})
    job = queue.get_job(job_id or "")
    assert job is not None
    assert (job.max_attempts, job.data) == (7, {"email": "ada@example.com", "plan": "free"})
    queue.register("dj-signup", signup)
    assert queue.run_pending("dj-signup") == 1
    assert seen == [Signup(email="ada@example.com")]


def test_a_bad_durabl_option_raises_at_the_django_decorator(declared: None) -> None:
    with pytest.raises(TypeError, match="on_dead_letter"):
        durabl_django.job("dj-bad", on_dead_letter="not callable")
    with pytest.raises(TypeError):
        durabl_django.job("dj-bad", no_such_option=1)
    assert "dj-bad" not in durabl.declared_types()


@pytest.mark.django_db(transaction=True)
def test_enqueue_on_commit_checks_the_schema_at_the_call_site(
    queue: JobQueue, declared: None
) -> None:
    durabl_django.job("dj-later", schema=Signup)(lambda job, ctx: None)
    with pytest.raises(PayloadValidationError, match="email"):
        durabl_django.enqueue_on_commit("dj-later", {"plan": "pro"})
    durabl.validate_enqueue("dj-later", {"email": "a@example.com"})  # valid: no error


def test_runworkers_also_runs_types_declared_with_plain_durabl_job(declared: None) -> None:
    from durabl_django.workers import declared_jobs

    @durabl.job("dj-plain", concurrency=3)
    def plain(job: durabl.Job[Any], ctx: durabl.JobContext) -> None: ...

    try:
        spec = declared_jobs()["dj-plain"]
        assert (spec.handler, spec.concurrency) == (plain.declaration.handler, 3)
    finally:
        durabl_registry.remove("dj-plain")
