"""The admin in a real headless Chromium: log in, open the failed jobs, open one, retry
it, and see it pending.

Needs Debian's ``chromium`` and ``chromium-driver`` (``make test`` installs them when it
can); skips with the reason when either is missing. The server is pytest-django's
``live_server`` (a real HTTP server in a thread of this process) on a SQLite job store.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from durabl import JobQueue, backend_from_url

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT = 15.0  # seconds any one page may take to show what the test waits for
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,1000",
)

pytestmark = pytest.mark.django_db(transaction=True)


def _missing() -> str | None:
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not os.access(path, os.X_OK):
            return f"{path} is missing: apt-get install {package} (make test does when root)"
    return None


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless Chromium with a fresh profile, driven through Debian's chromedriver."""
    reason = _missing()
    if reason:
        pytest.skip(reason)
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="durabl-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def store(settings: Any, tmp_path: Path) -> Iterator[JobQueue]:
    """Point DURABL at a SQLite file; a queue of the test's own on the same file."""
    url = f"sqlite:///{tmp_path / 'jobs.sqlite3'}"
    settings.DURABL = {"URL": url}
    queue = JobQueue(backend_from_url(url))
    yield queue
    queue.backend.close()


def declined(job: Any, ctx: Any) -> None:
    ctx.log("charging the card")
    raise RuntimeError("card declined <b>twice</b>")


def test_retry_a_failed_job_from_the_admin(
    browser: Any, live_server: Any, store: JobQueue, django_user_model: Any
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    django_user_model.objects.create_superuser("admin", "admin@example.com", "pw")
    store.register("charge-card", declined)
    job_id = store.enqueue("charge-card", {"order": "A-1"}, max_attempts=1)
    assert job_id is not None and store.run_pending() == 1
    failed = store.get_job(job_id)
    assert failed is not None and failed.status == "failed"

    wait = WebDriverWait(browser, WAIT)

    def click(by: str, what: str) -> None:
        wait.until(ec.element_to_be_clickable((by, what))).click()

    # Log in.
    browser.get(f"{live_server.url}/admin/login/?next=/admin/")
    wait.until(ec.visibility_of_element_located((By.ID, "id_username"))).send_keys("admin")
    browser.find_element(By.ID, "id_password").send_keys("pw")
    click(By.CSS_SELECTOR, "#login-form input[type=submit]")

    # The admin index -> Durabl's failed jobs.
    click(By.LINK_TEXT, "Failed jobs")
    wait.until(ec.title_contains("Failed jobs"))
    row = wait.until(
        ec.visibility_of_element_located(
            (By.XPATH, f"//table[@id='result_list']//tr[.//a[text()='{job_id}']]")
        )
    )
    assert "card declined <b>twice</b>" in row.text  # shown as text, not markup

    # The job's page -> Retry -> confirm.
    click(By.LINK_TEXT, job_id)
    wait.until(ec.title_contains(f"Job {job_id}"))
    assert field(browser, "Status") == "failed"
    click(By.CSS_SELECTOR, "ul.object-tools a[href$='/retry/']")
    wait.until(ec.url_contains("/retry/"))
    assert "Are you sure you want to retry the job" in browser.page_source
    click(By.CSS_SELECTOR, "#content-main form input[type=submit]")

    # Back on the job's page: a message, and the job is pending again.
    message = wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, "ul.messagelist li")))
    assert message.text == f"Job {job_id} retried: it is pending again."
    wait.until(lambda driver: field(driver, "Status") == "pending")
    assert field(browser, "Attempts") == "0 of 1"
    retried = store.get_job(job_id)
    assert retried is not None and retried.status == "pending" and retried.attempts == 0


def field(browser: Any, label: str) -> str:
    """The value next to ``label:`` on a job's page."""
    from selenium.webdriver.common.by import By

    xpath = (
        f"//div[contains(@class, 'flex-container')][label[normalize-space()='{label}:']]"
        "/div[contains(@class, 'readonly')]"
    )
    return str(browser.find_element(By.XPATH, xpath).text.strip())
