"""`judge view` in a real headless Chromium: click through the pages of a store of real runs."""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from clinjudge.reports import ViewerServer, export_site
from clinjudge.reports._viewer_links import item_page_path
from tests.browser_support import dialogs_fired, wait_for_new_page
from tests.cli._helpers import query
from tests.reports._store import FAILING_ID, HOSTILE, HOSTILE_ID, HOSTILE_RATIONALE, ViewerStore


@pytest.fixture(scope="module")
def server(viewer_store: ViewerStore) -> Iterator[ViewerServer]:
    with ViewerServer(viewer_store.db, n_boot=100) as srv:
        yield srv


def _go(driver: Any, element: Any) -> None:
    """Click a link or button and wait until the next page has loaded."""
    old = driver.find_element(By.TAG_NAME, "html")
    element.click()
    wait_for_new_page(driver, old)


def _back(driver: Any) -> None:
    old = driver.find_element(By.TAG_NAME, "html")
    driver.back()
    wait_for_new_page(driver, old)


def _text(driver: Any) -> str:
    return driver.find_element(By.TAG_NAME, "body").text


def _shot(driver: Any, tmp_path: Path, name: str) -> None:
    driver.save_screenshot(str(tmp_path / f"{name}.png"))
    assert (tmp_path / f"{name}.png").stat().st_size > 1000


def _row(driver: Any, table_css: str, first_cell: str) -> list[str]:
    """Cell texts of the row whose first cell starts with ``first_cell``."""
    for row in driver.find_elements(By.CSS_SELECTOR, f"{table_css} tbody tr"):
        cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
        if cells and cells[0].startswith(first_cell):
            return cells
    raise AssertionError(f"no row {first_cell!r} in {table_css}")


def _final_median(db: Path, run_id: str, item_id: str, attribute: str) -> float:
    """Independent reference: the median of the item's valid samples from the database."""
    values = [
        r[0]
        for r in query(
            db,
            "SELECT value FROM judgments WHERE run_id = ? AND item_id = ? AND attribute = ? "
            "AND sample > 0 AND status = 'ok' AND value IS NOT NULL",
            [run_id, item_id, attribute],
        )
    ]
    return statistics.median(values)


def _fmt(value: float) -> str:
    return f"{value:g}" if float(value).is_integer() else f"{value:.3f}"


def test_runs_run_item_discussion_compare(
    browser: Any, server: ViewerServer, viewer_store: ViewerStore, tmp_path: Path
) -> None:
    s = viewer_store
    browser.get(server.url + "/")
    text = _text(browser)
    for name in ("single fake", "magentic fake panel", "doclens mock", "audit mock"):
        assert name in text
    # The SIMULATED badge marks the mock runs only.
    rows = {
        r.find_elements(By.TAG_NAME, "td")[1].text: r
        for r in browser.find_elements(By.CSS_SELECTOR, "table.runs tbody tr")
    }
    assert "SIMULATED" in next(v for k, v in rows.items() if k.startswith(s.doclens)).text
    assert "SIMULATED" not in next(v for k, v in rows.items() if k.startswith(s.single)).text
    _shot(browser, tmp_path, "1-runs")

    # runs -> run
    _go(browser, browser.find_element(By.LINK_TEXT, s.single))
    text = _text(browser)
    assert f"Run {s.single}" in text and "Final score distributions" in text
    assert "Agreement with physicians" in text  # ratings were imported for three items
    assert "invalid reply" in text  # the failure reason of the always-invalid item
    _shot(browser, tmp_path, "2-run")

    # run -> failing item (linked from its failure reason)
    _go(browser, browser.find_element(By.LINK_TEXT, FAILING_ID))
    text = _text(browser)
    assert f"Item {FAILING_ID}" in text and "citation=9 is outside 1..5" in text
    _back(browser)

    # run -> item with ratings: final = median of samples; physicians beside it
    _go(browser, browser.find_element(By.LINK_TEXT, "item-0000"))
    _shot(browser, tmp_path, "3-item")
    cells = _row(browser, "table.scores", "Accurate")
    want = _final_median(s.db, s.single, "item-0000", "accurate")
    assert cells[1] == _fmt(want)
    headers = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "table.scores th")]
    assert headers[:4] == ["attribute", "final", "sample 1", "sample 2"]
    assert "phys-a" in headers and "phys-b" in headers
    rated = {
        (r["rater_id"], r["attribute"]): r["score"]
        for r in s.ratings
        if r["item_id"] == "item-0000"
    }
    assert cells[headers.index("phys-a")] == str(rated[("phys-a", "accurate")])
    # A [Note 3] citation in the summary jumps to the note.
    browser.find_element(By.CSS_SELECTOR, "a.cite[href='#note-3']").click()
    assert browser.execute_script("return location.hash") == "#note-3"
    assert browser.find_element(By.ID, "note-3").is_displayed()

    # every call with its raw reply (collapsed)
    replies = [
        r[0]
        for r in query(
            s.db,
            "SELECT content FROM messages WHERE run_id = ? AND item_id = 'item-0000' "
            "AND role = 'assistant' ORDER BY sample, seq",
            [s.single],
        )
    ]
    shown = browser.find_elements(By.CSS_SELECTOR, "table.calls tr.reply pre")
    assert [p.get_attribute("textContent") for p in shown] == replies and len(replies) == 2
    assert not shown[0].is_displayed()

    # the magentic discussion
    browser.get(f"{server.url}/runs/{s.magentic}/items/item-0000")
    text = _text(browser)
    assert "Discussion" in text and "ROUND 1" in text and "DECISION" in text
    marks = [m.text for m in browser.find_elements(By.CSS_SELECTOR, "ol.chat li.mark")]
    assert marks[0] == "BLIND ROUND: MEMBERS GRADE ALONE" and marks[-1] == "DECISION"
    blind = browser.find_elements(By.CSS_SELECTOR, "ol.chat li.k-blind .agent")
    assert sorted(b.text for b in blind) == ["high_scorer", "low_scorer"]
    agents = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "ol.chat .who .agent")]
    assert {"high_scorer", "low_scorer", "orchestrator"} <= set(agents)
    ledger = browser.find_element(By.CSS_SELECTOR, "details.ledger")
    assert not ledger.find_element(By.TAG_NAME, "table").is_displayed()
    ledger.find_element(By.TAG_NAME, "summary").click()
    assert ledger.find_element(By.TAG_NAME, "table").is_displayed()
    orchestrator_calls = query(
        s.db,
        "SELECT count(*) FROM calls WHERE run_id = ? AND item_id = 'item-0000' "
        "AND role = 'orchestrator'",
        [s.magentic],
    )[0][0]
    assert len(ledger.find_elements(By.CSS_SELECTOR, "tbody tr")) == orchestrator_calls
    members = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "table.members th")]
    assert members[1:] == ["orchestrator (decision)", "high_scorer", "low_scorer"]
    _shot(browser, tmp_path, "4-discussion")

    # a panel: each member's scores beside the panel's decision
    browser.get(f"{server.url}/runs/{s.panel}/items/item-0001")
    members = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "table.members th")]
    assert members[1:] == ["panel (decision)", "high_scorer", "low_scorer"]
    stored = dict(
        query(
            s.db,
            "SELECT agent, value FROM judgments WHERE run_id = ? AND item_id = 'item-0001' "
            "AND sample = 1 AND attribute = 'accurate'",
            [s.panel],
        )
    )
    cells = _row(browser, "table.members", "accurate")
    assert cells[1:] == [_fmt(stored[a]) for a in ("panel", "high_scorer", "low_scorer")]

    # runs -> pick two -> compare
    browser.get(server.url + "/")
    button = browser.find_element(By.ID, "compare-button")
    assert not button.is_enabled()
    for rid in (s.single, s.magentic):
        browser.find_element(By.CSS_SELECTOR, f"input[value='{rid}']").click()
    assert button.is_enabled()
    _go(browser, button)
    text = _text(browser)
    assert "Items, largest disagreement first" in text
    first = browser.find_element(By.CSS_SELECTOR, "table.cmp-items tbody tr td a").text
    assert first == _most_disputed(s.db, s.single, s.magentic)
    assert "ICC(3,k)" in text
    _shot(browser, tmp_path, "5-compare")
    assert dialogs_fired(browser) == []


def _most_disputed(db: Path, a: str, b: str) -> str:
    """Reference: the shared item with the largest sum of |a - b| over attributes."""
    rows = query(
        db,
        "SELECT run_id, item_id, attribute, value FROM judgments WHERE final AND run_id IN (?, ?)",
        [a, b],
    )
    values: dict[tuple[str, str], dict[str, float]] = {}
    for run_id, item, attribute, value in rows:
        if value is not None:
            values.setdefault((item, attribute), {})[run_id] = value
    totals: dict[str, float] = {}
    for (item, _), by_run in values.items():
        if len(by_run) == 2:
            totals[item] = totals.get(item, 0.0) + abs(by_run[a] - by_run[b])
    return max(sorted(totals), key=lambda i: totals[i])


def test_hostile_text_shows_as_text_and_runs_nothing(
    browser: Any, server: ViewerServer, viewer_store: ViewerStore, tmp_path: Path
) -> None:
    s = viewer_store
    for path in ("/", f"/runs/{s.single}/", f"/runs/{s.single}/items/{HOSTILE_ID}"):
        browser.get(server.url + path)
        assert dialogs_fired(browser) == [], path
    summary = browser.find_element(By.CSS_SELECTOR, "div.summary").text
    assert summary == HOSTILE  # every character shown literally
    text = _text(browser)
    assert HOSTILE_RATIONALE in text
    assert "</textarea><script>alert(2)</script>" in text  # a source note
    assert browser.find_elements(By.CSS_SELECTOR, "main img, main b, main textarea") == []
    assert browser.execute_script("return document.querySelectorAll('script').length") == 1
    _shot(browser, tmp_path, "xss")


def test_doclens_prm_and_audit_pages(
    browser: Any, server: ViewerServer, viewer_store: ViewerStore, tmp_path: Path
) -> None:
    s = viewer_store
    browser.get(f"{server.url}/runs/{s.doclens}/items/dl-001")
    sentences = browser.find_elements(By.CSS_SELECTOR, "ol.sentences li")
    stored = query(
        s.db,
        "SELECT verdict, citations FROM claims WHERE run_id = ? AND item_id = 'dl-001' "
        "AND kind = 'citation' ORDER BY idx",
        [s.doclens],
    )
    assert [li.get_attribute("class") for li in sentences] == [f"v-{v}" for v, _ in stored]
    # A citation opens the collapsed list of numbered source units at its unit.
    cite = browser.find_element(By.CSS_SELECTOR, "ol.sentences a.cite")
    target = cite.get_attribute("href").split("#", 1)[1]
    assert not browser.find_element(By.ID, target).is_displayed()
    cite.click()  # the page's script opens the <details> on hashchange
    WebDriverWait(browser, 10).until(lambda d: d.find_element(By.ID, target).is_displayed())
    _shot(browser, tmp_path, "doclens")

    if s.prm is not None:
        browser.get(f"{server.url}/runs/{s.prm}/items/prm-0000")
        (score,) = query(
            s.db, "SELECT score FROM prm_steps WHERE run_id = ? AND item_id = 'prm-0000'", [s.prm]
        )[0]
        bars = browser.find_elements(By.CSS_SELECTOR, "table.steps svg title")
        assert [b.get_attribute("textContent") for b in bars] == [f"step score {score:.3f}"]
        _shot(browser, tmp_path, "prm")

    browser.get(f"{server.url}/runs/{s.audit}/")
    _go(browser, browser.find_element(By.PARTIAL_LINK_TEXT, "audit: vendors side by side"))
    text = _text(browser)
    assert "Vendors side by side" in text and "Paired tests" in text
    headers = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "table.vendors th")]
    assert headers == ["attribute", "vendor_a", "vendor_b", "vendor_c"]
    link = browser.find_element(By.CSS_SELECTOR, "table.flagged a")
    flagged = link.text
    _go(browser, link)
    assert f"Item {flagged}" in _text(browser) and "audit flags" in _text(browser)
    _shot(browser, tmp_path, "audit")


def test_static_export_opens_from_disk(
    browser: Any, viewer_store: ViewerStore, tmp_path: Path
) -> None:
    s = viewer_store
    out = tmp_path / "site"
    export_site(s.db, out, runs=[s.single, s.magentic, s.doclens],
                compares=[[s.single, s.magentic]], n_boot=100)  # fmt: skip
    browser.get((out / "index.html").as_uri())
    # The stylesheet loaded under the page's CSP (header bar colour from viewer.css).
    colour = browser.execute_script(
        "return getComputedStyle(document.querySelector('header.top')).backgroundColor"
    )
    assert colour == "rgb(36, 41, 47)"
    _go(browser, browser.find_element(By.LINK_TEXT, s.magentic))
    assert f"Run {s.magentic}" in _text(browser)
    _go(browser, browser.find_element(By.LINK_TEXT, "item-0001"))
    assert "Discussion" in _text(browser) and browser.current_url.startswith("file://")
    _go(browser, browser.find_element(By.LINK_TEXT, "Runs"))
    _go(browser, browser.find_element(By.PARTIAL_LINK_TEXT, " vs "))
    assert "Items, largest disagreement first" in _text(browser)
    browser.get((out / "index.html").as_uri())
    _go(browser, browser.find_element(By.LINK_TEXT, s.single))
    _go(browser, browser.find_element(By.LINK_TEXT, HOSTILE_ID))
    assert browser.find_element(By.CSS_SELECTOR, "div.summary").text == HOSTILE
    assert dialogs_fired(browser) == []
    _shot(browser, tmp_path, "export")
    # The package's script runs from disk too: a citation target opens its collapsed list.
    browser.get((out / item_page_path(s.doclens, "dl-001")).as_uri() + "#unit-1")
    WebDriverWait(browser, 10).until(
        lambda d: d.execute_script("return document.getElementById('units').open")
    )
