"""The item list and item pages of `judge view` in headless Chromium at 1280 px: search, sort
and filter through the page's own controls, page through the result, step through it with
j / k and the arrow keys, and no table wider than the window."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from clinjudge.reports import ViewerServer
from tests.browser_support import dialogs_fired, wait_for_new_page
from tests.cli._helpers import query
from tests.reports._store import ViewerStore


@pytest.fixture(scope="module")
def server(viewer_store: ViewerStore) -> Iterator[ViewerServer]:
    with ViewerServer(viewer_store.db, n_boot=50, items_per_page=2) as srv:
        yield srv


def _listed(driver: Any) -> list[str]:
    return [a.text for a in driver.find_elements(By.CSS_SELECTOR, "table.items tbody td a")]


def _go(driver: Any, action: Any) -> None:
    old = driver.find_element(By.TAG_NAME, "html")
    action()
    wait_for_new_page(driver, old)


def _fits(driver: Any) -> None:
    """Nothing makes the page wider than the window: wide tables scroll inside themselves."""
    width = driver.execute_script("return document.documentElement.clientWidth")
    assert driver.execute_script("return document.documentElement.scrollWidth") <= width
    for table in driver.find_elements(By.CSS_SELECTOR, "main table"):
        right = driver.execute_script("return arguments[0].getBoundingClientRect().right", table)
        box = driver.execute_script(
            "var s = arguments[0].closest('.scroll') || arguments[0];"
            "return s.getBoundingClientRect().right",
            table,
        )
        assert box <= width, table.get_attribute("class")
        assert right <= width or box < right  # wider than the window: it scrolls in its box


def test_search_sort_page_and_step_with_the_keyboard(
    browser: Any, server: ViewerServer, viewer_store: ViewerStore, tmp_path: Path
) -> None:
    s = viewer_store
    browser.get(f"{server.url}/runs/{s.single}/")
    _fits(browser)
    form = browser.find_element(By.CSS_SELECTOR, "form.items-form")
    form.find_element(By.NAME, "q").send_keys("item-000")
    Select(form.find_element(By.NAME, "sort")).select_by_value("score:accurate")
    form.find_element(By.NAME, "desc").click()
    _go(browser, lambda: form.find_element(By.CSS_SELECTOR, "button[type=submit]").click())
    state = parse_qs(urlparse(browser.current_url).query)
    assert state["q"] == ["item-000"] and state["sort"] == ["score:accurate"]
    sql = (
        "SELECT item_id, value FROM judgments WHERE run_id = ? AND final "
        "AND attribute = 'accurate' AND item_id LIKE 'item-000%'"
    )
    finals = dict(query(s.db, sql, [s.single]))
    sql = "SELECT item_id, position FROM items WHERE run_id = ?"
    positions = dict(query(s.db, sql, [s.single]))
    want = sorted(finals, key=lambda i: (-(finals[i] if finals[i] is not None else -99),
                                         positions[i]))  # fmt: skip
    seen = _listed(browser)
    assert seen == want[:2]  # two per page
    browser.save_screenshot(str(tmp_path / "list-sorted.png"))
    _go(browser, lambda: browser.find_element(By.CSS_SELECTOR, ".pager a[rel=next]").click())
    seen += _listed(browser)
    assert seen == want[: len(seen)] and len(seen) == min(4, len(want))
    # Open the first item, then j / k / arrows walk the list as sorted, keeping the state.
    browser.get(f"{server.url}/runs/{s.single}/?q=item-000&sort=score:accurate&desc=1")
    _go(browser, lambda: browser.find_element(By.LINK_TEXT, want[0]).click())
    path = [unquote(urlparse(browser.current_url).path.rsplit("/", 1)[1])]
    for key in ("j", Keys.ARROW_RIGHT):
        _go(browser, lambda key=key: browser.find_element(By.TAG_NAME, "body").send_keys(key))
        path.append(unquote(urlparse(browser.current_url).path.rsplit("/", 1)[1]))
        assert parse_qs(urlparse(browser.current_url).query)["sort"] == ["score:accurate"]
    assert path == want[:3]
    assert f"item 3 of {len(want)}" in browser.find_element(By.TAG_NAME, "body").text
    _go(browser, lambda: browser.find_element(By.TAG_NAME, "body").send_keys("k"))
    assert unquote(urlparse(browser.current_url).path).endswith(want[1])
    _go(browser, lambda: browser.find_element(By.TAG_NAME, "body").send_keys(Keys.ARROW_LEFT))
    assert unquote(urlparse(browser.current_url).path).endswith(want[0])
    _fits(browser)
    browser.save_screenshot(str(tmp_path / "item-in-list.png"))
    # Typing in a field is not a key press for the page: a search box keeps its j.
    browser.get(f"{server.url}/runs/{s.single}/")
    box = browser.find_element(By.NAME, "q")
    box.send_keys("j")
    assert box.get_attribute("value") == "j" and "/items/" not in browser.current_url
    assert dialogs_fired(browser) == []


def test_sort_headers_filters_and_wide_pages_fit_the_window(
    browser: Any, server: ViewerServer, viewer_store: ViewerStore, tmp_path: Path
) -> None:
    s = viewer_store
    browser.get(f"{server.url}/runs/{s.single}/?rated=1")
    header = browser.find_element(By.CSS_SELECTOR, "table.items th.human a")
    _go(browser, header.click)
    state = parse_qs(urlparse(browser.current_url).query)
    assert state["sort"][0].startswith("absdiff:") and state["desc"] == ["1"]
    assert state["rated"] == ["1"]
    _fits(browser)
    # A score condition from the form shows as a chip; its × takes it away again.
    form = browser.find_element(By.CSS_SELECTOR, "form.items-form")
    Select(form.find_element(By.NAME, "where_attribute")).select_by_value("accurate")
    Select(form.find_element(By.NAME, "where_op")).select_by_value(">=")
    form.find_element(By.NAME, "where_value").send_keys("2")
    _go(browser, lambda: form.find_element(By.CSS_SELECTOR, "button[type=submit]").click())
    chip = browser.find_element(By.CSS_SELECTOR, ".listed .chip a.drop")
    assert "accurate ≥ 2" in browser.find_element(By.CSS_SELECTOR, ".listed").text
    _go(browser, chip.click)
    assert "where" not in parse_qs(urlparse(browser.current_url).query)
    for path in (
        f"/compare?run={s.single}&run={s.magentic}&run={s.panel}",
        f"/runs/{s.magentic}/items/item-0000",
        f"/runs/{s.single}/items/item-0000",
    ):
        browser.get(server.url + path)
        _fits(browser)
    browser.save_screenshot(str(tmp_path / "compare.png"))
