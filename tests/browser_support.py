"""Headless Chromium for browser tests (Selenium + Debian's `chromium` and `chromium-driver`).

Usage, in a test module::

    from tests.browser_support import browser  # noqa: F401  (pytest fixture)

    def test_page(browser, tmp_path):
        browser.get("file:///tmp/report.html")          # or http://127.0.0.1:PORT/
        assert "Agreement" in browser.find_element(By.TAG_NAME, "body").text
        browser.save_screenshot(str(tmp_path / "page.png"))
        assert browser.execute_script("return window.__alerts") == []

Or without pytest fixtures: ``with chromium() as driver: ...``.

What you get: a ``selenium.webdriver.Chrome`` driver, headless, 1280x900 window, with a script
installed before every page load (Chrome DevTools ``Page.addScriptToEvaluateOnNewDocument``) that
replaces ``window.alert``, ``confirm`` and ``prompt`` with recorders pushing their message onto
``window.__alerts`` (a list). So an XSS test asserts ``browser.execute_script("return
window.__alerts") == []``; :func:`dialogs_fired` does that and also checks for a native dialog that
slipped past the hook.

When Chromium or its driver is missing the fixture skips with a message naming the Debian packages
to install (``apt-get install chromium chromium-driver``); when the environment has ``CI=true`` it
fails instead, because CI (``.ci/run``) installs them and browser tests must never skip there.
Paths may be overridden with ``CLINJUDGE_CHROMIUM`` and ``CLINJUDGE_CHROMEDRIVER``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

_ALERT_HOOK = """
window.__alerts = [];
for (const name of ['alert', 'confirm', 'prompt']) {
  window[name] = function (message) { window.__alerts.push(String(message)); return null; };
}
"""


def _find(env: str, names: tuple[str, ...]) -> str | None:
    explicit = os.environ.get(env)
    if explicit:
        return explicit if os.path.exists(explicit) else None
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    return None


def _unavailable(reason: str) -> None:
    message = (
        f"{reason}; install Debian's packages: apt-get install chromium chromium-driver "
        "(and pip install selenium)"
    )
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"browser tests must run in CI: {message}")
    pytest.skip(message)


@contextmanager
def chromium(width: int = 1280, height: int = 900) -> Iterator[Any]:
    """Yield a headless Chromium driver with dialog hooks; skip (or fail under CI=true) if absent.

    Args:
        width: window width in pixels (screenshots have this size).
        height: window height in pixels.
    """
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _unavailable("selenium is not installed")
    binary = _find("CLINJUDGE_CHROMIUM", ("chromium", "chromium-browser"))
    driver_path = _find("CLINJUDGE_CHROMEDRIVER", ("chromedriver",))
    if binary is None or driver_path is None:
        _unavailable("Chromium or chromedriver not found")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--allow-file-access-from-files",
        f"--window-size={width},{height}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": _ALERT_HOOK})
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless Chromium (selenium WebDriver); see the module docstring."""
    with chromium() as driver:
        yield driver


def dialogs_fired(driver: Any) -> list[str]:
    """Messages of alert/confirm/prompt calls on the current page (hooked or native)."""
    from selenium.common.exceptions import NoAlertPresentException

    fired: list[str] = []
    try:
        native = driver.switch_to.alert
        fired.append(native.text)
        native.dismiss()
    except NoAlertPresentException:
        pass
    hooked = driver.execute_script("return window.__alerts || []")
    return fired + [str(m) for m in hooked]


def wait_for_new_page(driver: Any, old_root: Any, timeout: float = 30) -> None:
    """Wait until the page that held ``old_root`` has been replaced and the new one has loaded.

    While a document is torn down Chromium can answer a command about the old element with a
    transient "unhandled inspector error" instead of a stale-element error; such answers mean
    "not yet", so they are retried rather than failing the test.

    Args:
        driver: The WebDriver.
        old_root: An element of the page being left (its ``<html>``), taken before navigating.
        timeout: Seconds to wait in all.
    """
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support.expected_conditions import staleness_of
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, timeout, ignored_exceptions=(WebDriverException,))
    wait.until(staleness_of(old_root))
    wait.until(lambda d: d.execute_script("return document.readyState") == "complete")
