"""Probe runs in `judge view`: the compare page's probe table, a variant's page with its
original side by side and the edit marked (escaped, no inline script), links between an
original and its variants, the probe badges of the item list, the static export, and one look
in headless Chromium."""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from clinjudge.reports import ViewerServer, create_app, export_site
from clinjudge.reports._viewer_links import item_page_path, run_page_path
from clinjudge.reports._viewer_probe import diff_pieces
from tests.browser_support import dialogs_fired

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def _items() -> list[dict[str, Any]]:
    out = []
    for i in range(3):
        notes = [
            f"On 2023-01-05 hypertension was noted and lisinopril {10 + i} mg daily was started.",
            "On 2023-02-10 left knee pain was reported, no swelling.",
        ]
        summary = (
            f"Hypertension on lisinopril {10 + i} mg daily [Note 1]. Left knee pain was "
            "reported, no swelling [Note 2]. Follow up in 3 months [Note 2]."
        )
        if i == 0:
            summary += " " + HOSTILE
        out.append({"id": f"it-{i}", "notes": notes, "summary": summary, "specialty": "ED"})
    return out


@pytest.fixture(scope="module")
def probe_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """Two probe runs (mock judge) of the same items, one with a hostile summary."""
    import clinjudge

    tmp = tmp_path_factory.mktemp("viewer_probe")
    data = tmp / "items.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _items()), encoding="utf-8")
    db = tmp / "p.duckdb"
    first = clinjudge.probe(
        data, model="mock/judge", probes="contradiction,uncited,neutral", db=str(db),
        name="first",
    )  # fmt: skip
    second = clinjudge.probe(
        data, model="mock/judge", probes="contradiction,padding", samples=3, db=str(db)
    )
    return db, first.run_id, second.run_id


@pytest.fixture(scope="module")
def client(probe_store: tuple[Path, str, str]) -> Iterator[TestClient]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield TestClient(create_app(probe_store[0], n_boot=20))


def _safe(html: str) -> None:
    """No inline script or handler, no inline style, the hostile text escaped."""
    assert re.findall(r"<script\b[^>]*>", html) == ['<script src="/static/viewer.js" defer>']
    assert not re.search(r"<[^>]+\son\w+\s*=", html)
    assert " style=" not in html
    assert "<img" not in html


def test_diff_marks_what_changed() -> None:
    left, right = diff_pieces("BNP 1,840 pg/mL [Note 2].", "BNP 3680 pg/mL.")
    assert [(p.text, p.mark) for p in left] == [
        ("BNP ", None),
        ("1,840", "del"),
        (" pg/mL", None),
        (" [Note 2]", "del"),
        (".", None),
    ]
    assert [p.text for p in right if p.mark == "ins"] == ["3680"]


def test_compare_page_shows_the_probe_table(
    client: TestClient, probe_store: tuple[Path, str, str]
) -> None:
    _, first, second = probe_store
    page = client.get(f"/compare?run={first}&run={second}")
    assert page.status_code == 200
    html = page.text
    _safe(html)
    table = html[html.index('id="probes"') :]
    table = table[: table.index("</table>")]
    heads = re.findall(r'<tr class="probe-head"><td class="l"><strong>(\w+)</strong>', table)
    assert heads == ["contradiction", "padding", "uncited", "neutral"]
    assert f'href="/runs/{first}/"' in table and f'href="/runs/{second}/"' in table
    assert table.count("not run") == 3  # padding in the first, uncited and neutral in the second
    assert re.search(r'class="l attr">accurate</td><td class="l">lower</td>', table)
    assert re.search(r"\d\.\d\d \[\d\.\d\d, \d\.\d\d\]", table)


def test_variant_page_shows_the_original_beside_it(
    client: TestClient, probe_store: tuple[Path, str, str]
) -> None:
    _, first, _ = probe_store
    page = client.get(f"/runs/{first}/items/it-0~uncited")
    assert page.status_code == 200
    html = page.text
    _safe(html)
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in html
    section = html[html.index('<section class="probe"') : html.index("</section>")]
    assert f'id="probe-original" href="/runs/{first}/items/it-0"' in section
    assert "3 citation(s) removed" in section
    original, variant = section.split('<div class="side-by-side">')[1].split("<h3>Variant")
    assert original.count("<del>") == 3 and "<ins>" not in original
    assert "[Note 1]" in original and "[Note 1]" not in variant
    # The other variants of the original are linked, and the scores are paired.
    assert f'href="/runs/{first}/items/it-0~neutral">neutral</a>' in section
    assert '<table class="probe-scores">' in section and '<td class="l">accurate</td>' in section
    # The original links to its variants; the item list marks the variants with their probe.
    original_page = client.get(f"/runs/{first}/items/it-0").text
    assert 'id="probe-variants"' in original_page
    assert f'href="/runs/{first}/items/it-0~contradiction"' in original_page
    listing = client.get(f"/runs/{first}/").text
    assert listing.count('<span class="badge probe" title="probe variant">') == 9


def test_static_export_keeps_the_probe_views(
    probe_store: tuple[Path, str, str], tmp_path: Path
) -> None:
    db, first, second = probe_store
    site = tmp_path / "site"
    export_site(db, site, runs=[first, second], compares=[[first, second]], n_boot=20)
    variant = (site / item_page_path(first, "it-1~contradiction")).read_text(encoding="utf-8")
    assert '<section class="probe"' in variant and "<del>" in variant and "<ins>" in variant
    # Links between an original and its variants point at the exported files.
    original = Path(item_page_path(first, "it-1")).name
    assert f'id="probe-original" href="{original}"' in variant
    assert (site / item_page_path(first, "it-1")).is_file()
    run_page = (site / run_page_path(first)).read_text(encoding="utf-8")
    assert 'class="badge probe"' in run_page
    compares = list((site / "compare").rglob("*.html"))
    assert any('id="probes"' in p.read_text(encoding="utf-8") for p in compares), compares


def test_variant_page_in_chromium(
    browser: Any, probe_store: tuple[Path, str, str], tmp_path: Path
) -> None:
    db, first, _ = probe_store
    with ViewerServer(db, n_boot=20) as server:
        browser.get(f"{server.url}/runs/{first}/items/it-0~contradiction")
        columns = browser.find_elements(By.CSS_SELECTOR, ".side-by-side > div")
        assert len(columns) == 2
        left, right = (c.rect for c in columns)
        assert abs(left["y"] - right["y"]) < 2 and left["x"] + left["width"] <= right["x"]
        assert columns[0].find_elements(By.TAG_NAME, "del")
        assert columns[1].find_elements(By.TAG_NAME, "ins")
        assert HOSTILE in columns[0].text  # shown as text, not run
        assert not dialogs_fired(browser)
        browser.save_screenshot(str(tmp_path / "variant.png"))
        assert (tmp_path / "variant.png").stat().st_size > 1000
