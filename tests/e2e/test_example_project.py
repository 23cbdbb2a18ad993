"""The example project, ``examples/shop``, as its README runs it: ``migrate``, then
``runserver`` and ``runworkers`` as two processes on the default SQLite files (moved to a
temporary directory with ``SHOP_DATA_DIR``), and once more with ``DURABL_URL`` pointing the
jobs at a database of their own on the real MongoDB server (``[mongodb]``). Orders are
placed over real HTTP; the workers run them and stop on SIGTERM; the admin lists them."""

from __future__ import annotations

import http.cookiejar
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from durabl import JobQueue, backend_from_url
from durabl.testing import wait_until
from tests.mongo_database import drop_database, fresh_database_url

ROOT = Path(__file__).resolve().parents[2]
MANAGE = ROOT / "examples" / "shop" / "manage.py"

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Shop:
    """``manage.py`` of the example in subprocesses, on a data directory of its own; its
    jobs in the default SQLite file there, or at ``durabl_url`` (``DURABL_URL``)."""

    def __init__(self, data_dir: Path, durabl_url: str | None = None) -> None:
        self.data_dir = data_dir
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PYTEST", "DJANGO_", "DURABL_"))  # this process's settings
        }
        self.env["SHOP_DATA_DIR"] = str(data_dir)
        if durabl_url is not None:
            self.env["DURABL_URL"] = durabl_url
        self.durabl_url = durabl_url or f"sqlite:///{data_dir / 'durabl.sqlite3'}"
        self.procs: list[subprocess.Popen[str]] = []

    def run(self, *args: str, **env: str) -> str:
        done = subprocess.run(
            [sys.executable, str(MANAGE), *args],
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def start(self, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, str(MANAGE), *args],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=30)


def output(proc: subprocess.Popen[str]) -> str:
    """Everything a stopped (or now killed) process wrote."""
    if proc.poll() is None:
        proc.kill()
    out, err = proc.communicate(timeout=30)
    return f"exit {proc.returncode}\nstdout:\n{out}\nstderr:\n{err}"


@pytest.fixture
def shop(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Shop]:
    """The shop on SQLite files; ``[mongodb]``: its jobs on the real MongoDB server."""
    durabl_url = None
    if getattr(request, "param", "sqlite") == "mongodb":
        durabl_url = fresh_database_url("durabl_shop")
    s = Shop(tmp_path, durabl_url)
    yield s
    s.stop()
    if durabl_url is not None:
        drop_database(durabl_url)


def admin_rows(page: str) -> list[str]:
    """The job ids an admin list shows, top to bottom."""
    return re.findall(r'<th class="field-id[^"]*"><a href="[^"]*">([^<]*)</a></th>', page)


@pytest.mark.parametrize("shop", ["sqlite", "mongodb"], indirect=True)
def test_the_example_shop_runs_with_runserver_and_runworkers(shop: Shop) -> None:
    shop.run("migrate", "--verbosity", "0")
    assert "no issues" in shop.run("check", "--database", "default")  # the store answers
    shop.run(
        "createsuperuser", "--noinput", "--username", "admin", "--email", "admin@example.com",
        DJANGO_SUPERUSER_PASSWORD="pw",
    )  # fmt: skip
    port = free_port()
    server = shop.start("runserver", f"127.0.0.1:{port}", "--noreload")
    url = f"http://127.0.0.1:{port}/"
    browser = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
    )

    def answers() -> bool:
        try:
            return bool(browser.open(url, timeout=5).status == 200)
        except (urllib.error.URLError, ConnectionError):
            return False

    assert wait_until(answers, 30), output(server)
    page = browser.open(url, timeout=10).read().decode()
    assert "No jobs yet" in page
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token is not None
    for payment in ("invoice", "card"):
        form = {"csrfmiddlewaretoken": token.group(1), "email": "ada@example.com"}
        body = urllib.parse.urlencode({**form, "payment": payment}).encode()
        response = browser.open(url, body, timeout=10)  # POST, then the redirect's GET
        assert response.status == 200 and response.url == url
    page = response.read().decode()
    assert "placed: its jobs are queued" in page
    assert "3 pending, 0 active, 0 completed" in page

    jobs = JobQueue(backend_from_url(shop.durabl_url))
    try:
        by_type = {job.type: job.id for job in jobs.list_jobs()}
        assert sorted(by_type) == ["charge-card", "fulfil-order", "send-receipt"]

        def status(job_type: str) -> str | None:
            job = jobs.get_job(by_type[job_type])
            return job.status if job else None

        workers = shop.start("runworkers")
        assert workers.stdout is not None
        assert workers.stdout.readline().strip() == (
            "durabl: processing charge-card (x1), fulfil-order (x1), send-receipt (x2); "
            "reaper on; scheduler on; Ctrl-C or SIGTERM to stop"
        )

        def settled() -> bool:
            return (
                status("send-receipt") == "completed"
                and status("fulfil-order") == "completed"
                and status("charge-card") == "failed"
            )

        assert wait_until(settled, 30), output(workers)
        workers.send_signal(signal.SIGTERM)
        assert workers.wait(timeout=30) == 0, output(workers)

        charged = jobs.get_job(by_type["charge-card"])
        assert charged is not None
        assert (charged.attempts, charged.failure_kind) == (2, "retries-exhausted")
        fulfilled = jobs.get_job(by_type["fulfil-order"])
        assert fulfilled is not None and "shipment TRK-" in fulfilled.logs[-1].message
    finally:
        jobs.backend.close()
    page = browser.open(url, timeout=10).read().decode()
    assert "0 pending, 0 active, 2 completed" in page and "1 failed" in page

    # The admin lists them: log in, open the failed and the completed lists.
    login = f"{url}admin/login/"
    form_page = browser.open(login, timeout=10).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form_page)
    assert token is not None
    credentials = {"username": "admin", "password": "pw", "next": "/admin/"}
    body = urllib.parse.urlencode({**credentials, "csrfmiddlewaretoken": token.group(1)})
    assert browser.open(login, body.encode(), timeout=10).url == f"{url}admin/"
    failed = browser.open(f"{url}admin/durabl_django/job/", timeout=10).read().decode()
    assert admin_rows(failed) == [by_type["charge-card"]]
    assert "card declined" in failed
    completed = browser.open(f"{url}admin/durabl_django/completedjob/", timeout=10)
    assert sorted(admin_rows(completed.read().decode())) == sorted(
        [by_type["send-receipt"], by_type["fulfil-order"]]
    )
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=30)


SHOW_PAYLOADS = """
import durabl_django
from django.test import Client
data = {"order_id": "</pre><script>x</script>", "n": [1, 2], "email": "ada@example.com"}
durabl_django.get_queue().enqueue("send-receipt", data)
print(Client(HTTP_HOST="localhost").get("/").content.decode())
"""


def test_the_shop_shows_payloads_as_escaped_indented_json(shop: Shop) -> None:
    shop.run("migrate", "--verbosity", "0")
    page = shop.run("shell", "--command", SHOW_PAYLOADS)
    [payload] = re.findall(r'<pre class="payload"><code>(.*?)</code></pre>', page, re.S)
    assert payload == (
        "{\n"
        "  &quot;email&quot;: &quot;ada@example.com&quot;,\n"
        "  &quot;n&quot;: [\n    1,\n    2\n  ],\n"
        "  &quot;order_id&quot;: &quot;&lt;/pre&gt;&lt;script&gt;x&lt;/script&gt;&quot;\n"
        "}"
    )
    assert "<script>x" not in page
