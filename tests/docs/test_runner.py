"""How :mod:`tests.docs.runner` runs the blocks the Django and operations pages rely on:
``needs django`` (a migrated project in a process of its own, with PostgreSQL as the site's
database under ``needs postgresql``), and what a block changes process-wide put back."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.conftest import postgres_url
from tests.docs.runner import PageRun
from tests.docs.snippets import Block, groups, read_page


def _blocks(tmp_path: Path, text: str) -> list[Block]:
    page = tmp_path / "page.md"
    page.write_text(text)
    [group] = groups(read_page(page, root=tmp_path))
    return group


def test_a_django_block_runs_in_a_migrated_project_with_the_app_an_earlier_block_wrote(
    tmp_path: Path,
) -> None:
    first, second, failing = _blocks(
        tmp_path,
        "<!-- snippet: file myapp/jobs.py -->\n"
        "<!-- snippet: needs django -->\n"
        "```python\n"
        "import durabl_django\n"
        "\n"
        '@durabl_django.job("welcome-email")\n'
        "def welcome_email(job, ctx): ...\n"
        "```\n"
        "<!-- snippet: continues -->\n"
        "<!-- snippet: needs django -->\n"
        "<!-- snippet: given\n"
        "from django.contrib.auth.models import User\n"
        'user = User.objects.create_user("ada")\n'
        "-->\n"
        "```python\n"
        "from django.conf import settings\n"
        "import durabl, durabl_django\n"
        'assert "myapp" in settings.INSTALLED_APPS\n'
        'assert "welcome-email" in durabl.declared_types()\n'
        'job_id = durabl_django.enqueue("welcome-email", {"user_id": user.pk})\n'
        "assert durabl_django.get_queue().get_job(job_id).data == {'user_id': user.pk}\n"
        "```\n"
        "<!-- snippet: continues -->\n"
        "<!-- snippet: needs django -->\n"
        "```python\n"
        'raise ValueError("a broken block")\n'
        "```\n",
    )
    run = PageRun()
    try:
        run.run(first)
        run.run(second)
        with pytest.raises(AssertionError, match="ValueError: a broken block") as failed:
            run.run(failing)
        assert f'page.md", line {failing.line + 1}' in str(failed.value)
    finally:
        run.close()


def test_a_django_block_that_needs_postgresql_keeps_the_site_and_its_jobs_in_one_schema(
    tmp_path: Path,
) -> None:
    """``django://default`` on the block's schema: a job enqueued in a rolled-back
    ``atomic()`` is gone with it, one in a committed block is stored beside the users."""
    [block] = _blocks(
        tmp_path,
        "<!-- snippet: needs django -->\n"
        "<!-- snippet: needs postgresql -->\n"
        "```python\n"
        "from django.conf import settings\n"
        "from django.contrib.auth.models import User\n"
        "from django.db import transaction\n"
        "import durabl_django\n"
        'assert settings.DURABL == {"URL": "django://default"}\n'
        "with transaction.atomic():\n"
        '    User.objects.create_user("ada")\n'
        '    durabl_django.enqueue("kept", {})\n'
        "with transaction.atomic():\n"
        '    durabl_django.enqueue("dropped", {})\n'
        "    transaction.set_rollback(True)\n"
        "```\n",
    )
    run = PageRun()
    try:
        run.run(block)
        [schema] = run._schemas
        query = sql.SQL(
            "SELECT type FROM {}.durabl_jobs UNION ALL SELECT username FROM {}.auth_user"
        )
        with psycopg.connect(postgres_url()) as conn:
            rows = conn.execute(query.format(sql.Identifier(schema), sql.Identifier(schema)))
            assert sorted(row[0] for row in rows) == ["ada", "kept"]
    finally:
        run.close()
    with psycopg.connect(postgres_url()) as conn:
        found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [schema])
        assert found.fetchone() is None


def test_the_environment_and_the_default_metrics_registry_are_put_back(tmp_path: Path) -> None:
    """A given may set a variable the block reads (a free port); ``metrics.install(queue)``
    registers on prometheus_client's default registry. Neither outlives the run."""
    from prometheus_client import REGISTRY

    before = set(REGISTRY._collector_to_names)
    [block] = _blocks(
        tmp_path,
        "<!-- snippet: given\n"
        "import os\n"
        'os.environ["SNIPPET_TEST_PORT"] = "9999"\n'
        "-->\n"
        "```python\n"
        "import os\n"
        "from durabl import JobQueue, MemoryBackend, metrics\n"
        'assert os.environ["SNIPPET_TEST_PORT"] == "9999"\n'
        "metrics.install(JobQueue(MemoryBackend()))\n"
        "```\n",
    )
    run = PageRun()
    try:
        run.run(block)
        assert "SNIPPET_TEST_PORT" not in os.environ
        assert set(REGISTRY._collector_to_names) != before
    finally:
        run.close()
    assert set(REGISTRY._collector_to_names) == before
