"""Every durabl admin page, in headless Chromium at 1280x1000 (the navigation sidebar
open) and at 390x844 (a phone), checked by ``layout_check.js`` for text that overflows
its box or is clipped, a page wider than the window, and runs of text that overlap; a
failure names the page, the viewport and the elements. Each page is also saved as a
screenshot (the folder is printed, and recorded as the ``screenshots`` property).

Needs Debian's ``chromium`` and ``chromium-driver``; skips with the reason when either is
missing (see ``test_admin_browser.py``). The store is a SQLite file filled by
:func:`tests.e2e.admin_seed.seed`.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from durabl import JobQueue
from tests.e2e.admin_seed import WAIT, Seeded, seed
from tests.e2e.test_admin_browser import open_chromium, sqlite_store

CHECK = (Path(__file__).parent / "layout_check.js").read_text()
VIEWPORTS = {"desktop": (1280, 1000), "phone": (390, 844)}
ADMIN = "/admin/durabl_django"

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with open_chromium() as driver:
        yield driver


@pytest.fixture
def store(settings: Any, tmp_path: Path) -> Iterator[JobQueue]:
    with sqlite_store(settings, tmp_path) as queue:
        yield queue


class Checker:
    """Opens pages at one viewport, saves each as a screenshot, and collects what the
    layout check finds on it."""

    def __init__(self, browser: Any, base_url: str, viewport: str, folder: Path) -> None:
        self.browser = browser
        self.base_url = base_url
        self.viewport = viewport
        self.folder = folder
        self.problems: list[str] = []
        self.pages = 0
        width, height = VIEWPORTS[viewport]
        browser.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {
                "width": width,
                "height": height,
                "deviceScaleFactor": 1,
                "mobile": viewport == "phone",
            },
        )

    def open(self, path: str) -> None:
        from selenium.webdriver.support.ui import WebDriverWait

        self.browser.get(self.base_url + path)
        WebDriverWait(self.browser, WAIT).until(
            lambda driver: driver.execute_script("return document.readyState") == "complete"
        )

    def check(self, name: str, path: str) -> list[str]:
        """Open ``path``, screenshot it, and record the layout problems found on it."""
        self.open(path)
        title = self.browser.title
        assert "/login/" not in self.browser.current_url and "|" in title, (name, title)
        self.pages += 1
        self.shoot(name)
        # Only on the phone may a wide table scroll inside a wrapper of its own.
        options = {"scrollers": self.viewport == "phone"}
        found = [str(p) for p in self.browser.execute_script(CHECK, options)]
        self.problems += [f"{name} at {self.viewport} ({path}): {p}" for p in found]
        return found

    def shoot(self, name: str) -> None:
        height = self.browser.execute_script("return document.documentElement.scrollHeight")
        width = self.browser.execute_script("return document.documentElement.clientWidth")
        clip = {"x": 0, "y": 0, "width": width, "height": min(int(height), 8000), "scale": 1}
        shot = self.browser.execute_cdp_cmd(
            "Page.captureScreenshot",
            {"format": "png", "captureBeyondViewport": True, "clip": clip},
        )
        path = self.folder / f"{self.pages:02d}-{name}-{self.viewport}.png"
        path.write_bytes(base64.b64decode(shot["data"]))


def login(checker: Checker, django_user_model: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    django_user_model.objects.create_superuser("admin", "admin@example.com", "pw")
    checker.open("/admin/login/?next=/admin/")
    checker.browser.find_element(By.ID, "id_username").send_keys("admin")
    checker.browser.find_element(By.ID, "id_password").send_keys("pw")
    checker.browser.find_element(By.CSS_SELECTOR, "#login-form input[type=submit]").click()
    WebDriverWait(checker.browser, WAIT).until(lambda driver: "/login/" not in driver.current_url)


def pages(seeded: Seeded) -> list[tuple[str, str]]:
    """(name, path) of every durabl admin page, each job page on the kind of job it shows."""
    return [
        ("app-index", f"{ADMIN}/"),
        ("overview", f"{ADMIN}/queueoverview/"),
        ("failed-list", f"{ADMIN}/job/"),
        ("pending-list", f"{ADMIN}/pendingjob/"),
        ("waiting-list", f"{ADMIN}/pendingjob/?waiting=1"),
        ("active-list", f"{ADMIN}/activejob/"),
        ("completed-list", f"{ADMIN}/completedjob/"),
        ("superseded-list", f"{ADMIN}/supersededjob/"),
        ("cancelled-list", f"{ADMIN}/cancelledjob/"),
        ("failed-job", f"{ADMIN}/job/{seeded.failed}/"),
        ("fatal-job", f"{ADMIN}/job/{seeded.fatal}/"),
        ("orchestration-job", f"{ADMIN}/completedjob/{seeded.orchestration}/"),
        ("failed-orchestration-job", f"{ADMIN}/job/{seeded.failed_orchestration}/"),
        ("active-job", f"{ADMIN}/activejob/{seeded.active}/"),
        ("pending-job", f"{ADMIN}/pendingjob/{seeded.pending}/"),
        ("cancelled-job", f"{ADMIN}/cancelledjob/{seeded.cancelled}/"),
        ("superseded-job", f"{ADMIN}/supersededjob/{seeded.superseded}/"),
        ("long-key-job", f"{ADMIN}/pendingjob/{seeded.long_key}/"),
        ("long-key-failed-job", f"{ADMIN}/job/{seeded.long_key_failed}/"),
        ("waiting-job", f"{ADMIN}/pendingjob/{seeded.waiting}/"),
        ("events", f"{ADMIN}/eventsubscription/"),
        ("workers", f"{ADMIN}/workerprocess/"),
        ("schedules", f"{ADMIN}/jobschedule/"),
        ("retry-confirmation", f"{ADMIN}/job/{seeded.failed}/retry/"),
        ("retry-all-confirmation", f"{ADMIN}/job/retry/?select_across=1&type=charge-card"),
        ("delete-confirmation", f"{ADMIN}/completedjob/{seeded.orchestration}/delete/"),
        ("cancel-confirmation", f"{ADMIN}/activejob/{seeded.active}/cancel/"),
    ]


SCROLLER = (
    "<div style='overflow-x:auto'><table style='width:3000px'><tr><td>x</td></tr></table></div>"
)
#: Pages the check must fault (the kinds of problem it must report) or pass ([]).
SAMPLES: dict[str, tuple[str, dict[str, bool], list[str]]] = {
    "headings that run together": (
        "<table><tr><th style='padding:0'>Running</th><th style='padding:0'>Started</th></tr>"
        "</table>",
        {},
        ["overlap"],
    ),
    "a label over its value": (
        "<div style='position:relative'><span>Label:</span>"
        "<span style='position:absolute;left:12px;top:2px'>value</span></div>",
        {},
        ["overlap"],
    ),
    "text spilling out of its box": (
        "<div style='width:80px;white-space:nowrap'>a line far too long for its box</div>",
        {},
        ["overflow"],
    ),
    "text clipped by its box": (
        "<div style='width:80px;white-space:nowrap;overflow:hidden'>a line far too long</div>",
        {},
        ["overflow"],
    ),
    "a page wider than the window": ("<div style='width:3000px'>wide</div>", {}, ["wide"]),
    "a table scrolling in its box, on a desktop": (SCROLLER, {"scrollers": False}, ["wide"]),
    "a table scrolling in its box, on a phone": (SCROLLER, {"scrollers": True}, []),
    "a link in a sentence, an ellipsis with its tooltip": (
        "<p>A sentence with <a href='#'>a link</a>, and <b>bold</b> in it.</p>"
        "<div style='width:80px;white-space:nowrap;overflow:hidden;text-overflow:ellipsis'"
        " title='a line far too long'>a line far too long</div>",
        {},
        [],
    ),
}


def test_the_layout_check_finds_what_it_must(browser: Any) -> None:
    """The check itself, on small pages that show each problem once (and two that have
    none): a check that passes everything would pass the admin too."""
    from urllib.parse import quote

    browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    found = {}
    for name, (body, options, _) in SAMPLES.items():
        page = f"<!doctype html><meta name=viewport content='width=device-width'><body>{body}"
        browser.get("data:text/html;charset=utf-8," + quote(page))
        problems = browser.execute_script(CHECK, options)
        found[name] = sorted({str(p).split(":", 1)[0] for p in problems})
    assert found == {name: kinds for name, (_, _, kinds) in SAMPLES.items()}


@pytest.fixture
def screenshots(tmp_path: Path, record_property: Callable[[str, Any], None]) -> Path:
    folder = tmp_path / "admin-layout"
    folder.mkdir()
    record_property("screenshots", str(folder))
    print(f"admin layout screenshots: {folder}")
    return folder


@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_no_page_overflows_or_overlaps(
    viewport: str,
    browser: Any,
    live_server: Any,
    store: JobQueue,
    django_user_model: Any,
    screenshots: Path,
) -> None:
    checker = Checker(browser, live_server.url, viewport, screenshots)
    login(checker, django_user_model)
    try:
        seeded = seed(store)
        for name, path in pages(seeded):
            checker.check(name, path)
    finally:
        store.shutdown(timeout=0.5)
    # With no worker left: the overview (the section's own page too) says so.
    checker.check("overview-no-worker", f"{ADMIN}/")
    assert "No worker is running" in browser.page_source
    assert checker.problems == [], "\n".join(checker.problems)
