"""The admin in a real headless Chromium: log in, open the failed jobs, copy a job's id
with its button, open the job, retry it, and see it pending; cancel a running job and
watch it end cancelled; read an orchestration's attempt timeline and steps; retry every
failed job a filter selects. Each page is saved as a screenshot 1280 px wide, with the
navigation sidebar open, into the test's artefacts folder (printed, and recorded as the
``screenshots`` property), and no list may scroll sideways at that width. The layout of
every page, at 1280 px and on a phone, is ``test_admin_layout.py``'s.

Needs Debian's ``chromium`` and ``chromium-driver`` (``make test`` installs them when it
can); skips with the reason when either is missing. The server is pytest-django's
``live_server`` (a real HTTP server in a thread of this process) on a SQLite job store.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from durabl import JobQueue, Orchestrator, backend_from_url

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


@contextlib.contextmanager
def open_chromium() -> Iterator[Any]:
    """A headless Chromium with a fresh profile, driven through Debian's chromedriver
    (skips the test when either is missing)."""
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


@contextlib.contextmanager
def sqlite_store(settings: Any, folder: Path) -> Iterator[JobQueue]:
    """Point DURABL at a SQLite file in ``folder``; a queue of the caller's on that file."""
    url = f"sqlite:///{folder / 'jobs.sqlite3'}"
    settings.DURABL = {"URL": url}
    queue = JobQueue(backend_from_url(url))
    try:
        yield queue
    finally:
        queue.backend.close()


@pytest.fixture
def browser() -> Iterator[Any]:
    with open_chromium() as driver:
        yield driver


@pytest.fixture
def store(settings: Any, tmp_path: Path) -> Iterator[JobQueue]:
    with sqlite_store(settings, tmp_path) as queue:
        yield queue


class Pages:
    """The browser with the waits the tests need, and a screenshot of each page it shows."""

    def __init__(self, browser: Any, base_url: str, folder: Path) -> None:
        from selenium.webdriver.support.ui import WebDriverWait

        self.browser = browser
        self.base_url = base_url
        self.folder = folder
        self.wait = WebDriverWait(browser, WAIT)
        self.shots: list[Path] = []

    def click(self, by: str, what: str) -> None:
        from selenium.webdriver.support import expected_conditions as ec

        self.wait.until(ec.element_to_be_clickable((by, what))).click()

    def visible(self, by: str, what: str) -> Any:
        from selenium.webdriver.support import expected_conditions as ec

        return self.wait.until(ec.visibility_of_element_located((by, what)))

    def login(self, username: str, password: str) -> None:
        from selenium.webdriver.common.by import By

        self.browser.get(f"{self.base_url}/admin/login/?next=/admin/")
        self.visible(By.ID, "id_username").send_keys(username)
        self.browser.find_element(By.ID, "id_password").send_keys(password)
        self.click(By.CSS_SELECTOR, "#login-form input[type=submit]")

    def shoot(self, name: str) -> Path:
        """Save the whole page, 1280 px wide, as ``NN-name.png``; then check that it does
        not scroll sideways and that the navigation sidebar is open."""
        from selenium.webdriver.common.by import By

        script = "return [document.documentElement.scrollWidth, window.innerWidth,"
        script += " document.documentElement.scrollHeight];"
        wide, width, height = self.browser.execute_script(script)
        clip = {"x": 0, "y": 0, "width": width, "height": min(int(height), 8000), "scale": 1}
        shot = self.browser.execute_cdp_cmd(
            "Page.captureScreenshot",
            {"format": "png", "captureBeyondViewport": True, "clip": clip},
        )
        path = self.folder / f"{len(self.shots) + 1:02d}-{name}.png"
        path.write_bytes(base64.b64decode(shot["data"]))
        self.shots.append(path)
        assert width == 1280, width
        assert wide <= width, f"{name}: the page is {wide} px wide in a {width} px window"
        if self.browser.find_elements(By.ID, "nav-sidebar"):
            assert self.browser.find_element(By.ID, "nav-sidebar").is_displayed(), name
        return path


@pytest.fixture
def pages(
    browser: Any, live_server: Any, tmp_path: Path, record_property: Callable[[str, Any], None]
) -> Pages:
    folder = tmp_path / "admin-screenshots"
    folder.mkdir()
    record_property("screenshots", str(folder))
    print(f"admin screenshots: {folder}")  # where a reviewer finds them
    return Pages(browser, live_server.url, folder)


def declined(job: Any, ctx: Any) -> None:
    ctx.log("charging the card")
    raise RuntimeError("card declined <b>twice</b>")


def test_retry_a_failed_job_from_the_admin(
    pages: Pages, store: JobQueue, django_user_model: Any
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    django_user_model.objects.create_superuser("admin", "admin@example.com", "pw")
    store.register("charge-card", declined)
    job_id = store.enqueue("charge-card", {"order": "A-1"}, max_attempts=1)
    assert job_id is not None and store.run_pending() == 1
    failed = store.get_job(job_id)
    assert failed is not None and failed.status == "failed"
    browser, wait, click = pages.browser, pages.wait, pages.click

    pages.login("admin", "pw")
    pages.shoot("admin-index")

    # The admin index -> Durabl's failed jobs.
    click(By.LINK_TEXT, "Failed jobs")
    wait.until(ec.title_contains("Failed jobs"))
    row = pages.visible(By.XPATH, f"//table[@id='result_list']//tr[@title='{job_id}']")
    assert "card declined <b>twice</b>" in row.text  # shown as text, not markup
    # The id shows as its first 8 characters and "…" (the link holds it whole).
    link = row.find_element(By.CSS_SELECTOR, "th.field-id a")
    assert shown_characters(pages.browser, link) == 8
    pages.shoot("failed-list")
    assert copied(pages, row) == job_id  # whole, by its copy button

    # The job's page -> Retry -> confirm.
    click(By.CSS_SELECTOR, f"#result_list tr[title='{job_id}'] th.field-id a")
    wait.until(ec.title_contains(f"Job {job_id}"))
    assert field(browser, "Status") == "failed"
    pages.shoot("failed-job")
    click(By.CSS_SELECTOR, "ul.object-tools a[href$='/retry/']")
    wait.until(ec.url_contains("/retry/"))
    assert "Are you sure you want to retry the job" in browser.page_source
    pages.shoot("retry-confirmation")
    click(By.CSS_SELECTOR, "#content-main form input[type=submit]")

    # Back on the job's page: a message, and the job is pending again.
    message = pages.visible(By.CSS_SELECTOR, "ul.messagelist li")
    assert message.text == f"Job {job_id} retried: it is pending again."
    wait.until(lambda driver: field(driver, "Status") == "pending")
    assert field(browser, "Attempts") == "0 of 1"
    retried = store.get_job(job_id)
    assert retried is not None and retried.status == "pending" and retried.attempts == 0
    pages.shoot("retried-job")


def test_cancel_a_run_read_its_steps_and_retry_all_matching(
    pages: Pages, store: JobQueue, django_user_model: Any
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    django_user_model.objects.create_superuser("admin", "admin@example.com", "pw")
    browser, wait, click = pages.browser, pages.wait, pages.click
    started = threading.Event()

    def hangs(job: Any, ctx: Any) -> None:
        started.set()
        ctx.signal.wait(WAIT * 4)  # until the admin's cancellation reaches it
        ctx.signal.raise_if_aborted()

    def ship(job: Any, octx: Any) -> None:
        octx.step("reserve stock", lambda keys, signal: "RES-1")
        if job.attempts == 1:
            raise RuntimeError("courier offline")
        octx.step("book courier", lambda keys, signal: "TRK-1")

    fast: dict[str, Any] = {"poll_interval": 0.05, "heartbeat_interval": 0.2}
    store.process("hangs", hangs, **fast)
    Orchestrator(store).define("ship", ship, **fast)
    try:
        shipped = store.enqueue(
            "ship", {"order": "B-2"}, max_attempts=2, backoff="fixed", backoff_delay=0.05
        )
        assert shipped is not None
        assert store.wait(shipped, timeout=WAIT).status == "completed"
        store.register("charge-card", declined)
        for n in range(3):
            store.enqueue("charge-card", {"order": f"C-{n}"}, max_attempts=1)
        store.register("send-mail", declined)
        mail = store.enqueue("send-mail", {"to": "ada@example.com"}, max_attempts=1)
        assert mail is not None and store.run_pending("charge-card") == 3
        assert store.run_pending("send-mail") == 1
        running = store.enqueue("hangs", {"order": "D-4"})
        assert running is not None and started.wait(WAIT)

        pages.login("admin", "pw")

        # Cancel the running job from its page and watch it end cancelled.
        click(By.LINK_TEXT, "Active jobs")
        wait.until(ec.title_contains("Active jobs"))
        pages.shoot("active-list")
        click(By.CSS_SELECTOR, f"#result_list tr[title='{running}'] th.field-id a")
        wait.until(ec.title_contains(f"Job {running}"))
        assert field(browser, "Status") == "active" and field(browser, "Worker")
        pages.shoot("active-job")
        click(By.CSS_SELECTOR, "ul.object-tools a[href$='/cancel/']")
        wait.until(ec.url_contains("/cancel/"))
        pages.shoot("cancel-confirmation")
        click(By.CSS_SELECTOR, "#content-main form input[type=submit]")
        message = pages.visible(By.CSS_SELECTOR, "ul.messagelist li")
        assert message.text.startswith(f"Job {running} cancelled")

        def ended_cancelled(driver: Any) -> bool:
            driver.get(f"{pages.base_url}/admin/durabl_django/activejob/{running}/")
            return field(driver, "Status") == "cancelled"

        wait.until(ended_cancelled)
        assert "/cancelledjob/" in browser.current_url  # under its new status's entry
        pages.shoot("cancelled-job")

        # The orchestration's page: two attempts, its steps, the first one replayed.
        click(By.LINK_TEXT, "Completed jobs")
        wait.until(ec.title_contains("Completed jobs"))
        pages.shoot("completed-list")
        click(By.CSS_SELECTOR, f"#result_list tr[title='{shipped}'] th.field-id a")
        wait.until(ec.title_contains(f"Job {shipped}"))
        attempts = browser.find_elements(By.CSS_SELECTOR, ".durabl-timeline tbody tr")
        outcomes = [row.find_elements(By.TAG_NAME, "td")[4].text for row in attempts]
        assert outcomes == ["retry-scheduled", "completed"]
        assert "courier offline" in attempts[0].text
        steps = [
            [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
            for row in browser.find_elements(By.CSS_SELECTOR, ".durabl-steps tbody tr")
        ]
        assert [(s[1], s[2], s[5]) for s in steps] == [
            ("reserve stock", "1", "replayed in attempt 2"),
            ("book courier", "2", ""),
        ]
        pages.shoot("orchestration-job")

        # Retry every failed charge-card job: filter, "Retry all 3 matching", confirm.
        click(By.LINK_TEXT, "Failed jobs")
        wait.until(ec.title_contains("Failed jobs"))
        click(By.CSS_SELECTOR, "#durabl-filters details[data-filter-title='type'] summary")
        click(By.CSS_SELECTOR, "#durabl-filters a[href='?type=charge-card']")
        wait.until(ec.url_contains("type=charge-card"))
        pages.shoot("failed-list-filtered")
        click(By.CSS_SELECTOR, "ul.object-tools a[href*='select_across=1']")
        wait.until(ec.url_contains("select_across=1"))
        assert 'all 3 failed jobs of type "charge-card"' in browser.page_source
        pages.shoot("retry-all-confirmation")
        click(By.CSS_SELECTOR, "#content-main form input[type=submit]")
        message = pages.visible(By.CSS_SELECTOR, "ul.messagelist li")
        assert message.text == "3 retried."
        assert store.count_jobs(status="pending", type="charge-card") == 3
        assert store.count_jobs(status="failed") == 1  # the send-mail job is not in the filter
        pages.shoot("after-retry-all")

        # Every other page, as the sidebar links them.
        for link, title in (
            ("/admin/durabl_django/pendingjob/", "Pending jobs"),
            ("/admin/durabl_django/cancelledjob/", "Cancelled jobs"),
            ("/admin/durabl_django/supersededjob/", "Superseded jobs"),
            ("/admin/durabl_django/queueoverview/", "Queue overview"),
            ("/admin/durabl_django/jobschedule/", "Schedules"),
            ("/admin/durabl_django/workerprocess/", "Workers"),
        ):
            browser.get(pages.base_url + link)
            wait.until(ec.title_contains(title))
            pages.shoot(link.strip("/").rsplit("/", 1)[-1])
        assert len(pages.shots) == 15
    finally:
        store.shutdown(timeout=WAIT)


def shown_characters(browser: Any, element: Any) -> int:
    """How many characters of ``element``'s text show before the "…" it is cut with."""
    script = """
        const [el] = arguments, text = el.textContent, probe = document.createElement("span");
        probe.style.cssText = "position:absolute;visibility:hidden;white-space:pre;font:"
            + getComputedStyle(el).font;
        document.body.appendChild(probe);
        let shown = 0;
        for (let n = 1; n < text.length; n++) {
            probe.textContent = text.slice(0, n) + "\u2026";
            if (probe.getBoundingClientRect().width <= el.clientWidth) shown = n;
        }
        probe.remove();
        return el.scrollWidth > el.clientWidth ? shown : text.length;
    """
    return int(browser.execute_script(script, element))


def copied(pages: Pages, within: Any) -> str:
    """Click the copy button in ``within`` and read what it put on the clipboard."""
    from selenium.webdriver.common.by import By

    pages.browser.execute_cdp_cmd(
        "Browser.grantPermissions",
        {
            "origin": pages.base_url,
            "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"],
        },
    )
    within.find_element(By.CSS_SELECTOR, "button.durabl-copy").click()
    pages.wait.until(lambda _: "durabl-copied" in within.get_attribute("innerHTML"))
    script = "arguments[arguments.length - 1]"
    script = f"navigator.clipboard.readText().then({script}, () => {script}(''));"
    return str(pages.browser.execute_async_script(script))


def field(browser: Any, label: str) -> str:
    """The value next to ``label:`` on a job's page."""
    from selenium.webdriver.common.by import By

    xpath = (
        f"//div[contains(@class, 'flex-container')][label[normalize-space()='{label}:']]"
        "/div[contains(@class, 'readonly')]"
    )
    return str(browser.find_element(By.XPATH, xpath).text.strip())
