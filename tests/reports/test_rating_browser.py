"""A rater in headless Chromium: three items rated by keyboard alone, one edited after going
back, a save that meets a stopped server shown as not saved and retried, and `judge agree`
reading the new ratings (SPEC §13, §16)."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from clinjudge.reports import RatingDesk, RatingServer
from tests.browser_support import browser, dialogs_fired  # noqa: F401  (pytest fixture)
from tests.cli._helpers import invoke, query
from tests.reports._rating_support import judged_run, plan

# citation, accurate, thorough, useful, organized, comprehensible, succinct, abstraction,
# synthesized, voice_summ, voice_note: one key each.
KEYS = "45344531400"


def _wait(condition: Any, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _type(driver: Any, keys: str) -> None:
    for key in keys:
        driver.switch_to.active_element.send_keys(key)


def _status(driver: Any) -> str:
    return str(driver.execute_script("return document.getElementById('status').dataset.state"))


@pytest.mark.filterwarnings("ignore")
def test_a_rater_rates_three_items_by_keyboard_and_edits_one(
    browser: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    from selenium.webdriver.common.keys import Keys

    db, run_id = judged_run(tmp_path, 4)
    plan(db, run_id, ["alice"], overlap="1", seed=1)
    desk = RatingDesk(db, run_id)
    link = desk.issue_link("alice")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = RatingServer(desk)
    with server:
        browser.get(f"{server.link(link)}")
        _wait(lambda: "/rate/items/1" in browser.current_url)
        assert "token" not in browser.current_url
        for n in (1, 2, 3):
            assert f"Item {n} of 4" in browser.title
            _type(browser, KEYS)
            browser.switch_to.active_element.send_keys(Keys.ENTER)
            _wait(lambda n=n: f"/rate/items/{n + 1}" in browser.current_url)
        browser.save_screenshot(str(tmp_path / "item4.png"))
        assert "3 of 4 done" in browser.find_element("id", "count").text
        # Back to the first item: the stored rating is shown; change "accurate" to 2.
        browser.get(f"{server.url}/rate/items/1")
        checked = browser.execute_script(
            "return document.querySelector('input[name=\"score.accurate\"]:checked').value"
        )
        assert checked == "5"
        _type(browser, "42")  # citation 4 again, then accurate 2
        browser.switch_to.active_element.send_keys(Keys.ENTER)
        _wait(lambda: "/rate/items/2" in browser.current_url)
        assert dialogs_fired(browser) == []
        port = int(server.url.rsplit(":", 1)[1])
    # The server is gone: a save is shown as not saved and retried until it is back.
    browser.execute_script(
        'document.querySelector(\'input[name="score.citation"][value="1"]\').checked = true'
    )
    browser.find_element("id", "save").send_keys(Keys.ENTER)
    _wait(lambda: _status(browser) == "lost")
    assert "not saved" in browser.find_element("id", "status").text
    browser.save_screenshot(str(tmp_path / "lost.png"))
    with RatingServer(desk, port=port):
        _wait(lambda: "/rate/items/3" in browser.current_url, timeout=30)
    order = [a["item_id"] for a in desk.assignments("alice")]
    desk.close()
    rows = query(
        db,
        "SELECT item_id, attribute, score FROM human_ratings WHERE rater_id = 'alice' "
        "AND attribute IN ('accurate', 'citation') ORDER BY item_id, attribute",
    )
    items = sorted({r[0] for r in rows})
    assert len(items) == 3
    scores = {(r[0], r[1]): r[2] for r in rows}
    history = query(db, "SELECT count(*) FROM rating_history WHERE attribute = 'accurate'")[0][0]
    assert history == 5  # three first ratings, the edit of item 1, the retried save of item 2
    assert scores[(order[0], "accurate")] == 2.0  # the edit
    assert scores[(order[1], "citation")] == 1.0  # the retried save landed, once
    assert {scores[(i, "accurate")] for i in order[1:3]} == {5.0}
    agree = invoke("agree", run_id, "--json", "--boot", "20", "--db", str(db))
    assert agree.exit_code == 0, agree.stderr
    result = json.loads(agree.stdout)
    text = json.dumps(result)
    assert "accurate" in text
