"""The item list of `judge view` as a triage tool: sorts, search, combined filters, the
physicians' median beside each attribute, the state in the address (checked, escaped), and
item pages that step through the list as sorted. References are computed here from the
database rows, in Python, never from the viewer's own queries."""

from __future__ import annotations

import re
import statistics
import warnings
from collections.abc import Iterator
from html import unescape
from pathlib import Path
from urllib.parse import quote

import pytest

from clinjudge.reports import create_app
from clinjudge.reports._viewer_item import SampleView, Turn
from clinjudge.reports._viewer_item_table import exchanges, number_turns
from tests.cli._helpers import query
from tests.reports._store import FAILING_ID, HOSTILE_ID, HOSTILE_RATIONALE, RATED, ViewerStore

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient


@pytest.fixture(scope="module")
def client(viewer_store: ViewerStore) -> Iterator[TestClient]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield TestClient(create_app(viewer_store.db, n_boot=20, items_per_page=100))


def _listed(client: TestClient, url: str) -> list[str]:
    response = client.get(url)
    assert response.status_code == 200, response.text[-800:]
    table = response.text.split('id="items"')[1]
    return [unescape(i) for i in re.findall(r'<a href="/runs/[^/]+/items/([^"?]+)[^"]*">', table)]


def _positions(db: Path, run: str) -> dict[str, int]:
    return dict(query(db, "SELECT item_id, position FROM items WHERE run_id = ?", [run]))


def _finals(db: Path, run: str, attribute: str) -> dict[str, float | None]:
    return dict(
        query(
            db,
            "SELECT item_id, value FROM judgments WHERE run_id = ? AND sample = 0 "
            "AND agent = 'final' AND attribute = ?",
            [run, attribute],
        )
    )


def _medians(db: Path, attribute: str) -> dict[str, float]:
    scores: dict[str, list[float]] = {}
    for item, score in query(
        db, "SELECT item_id, score FROM human_ratings WHERE attribute = ?", [attribute]
    ):
        if score is not None:
            scores.setdefault(item, []).append(score)
    return {item: statistics.median(v) for item, v in scores.items()}


def _ordered(keys: dict[str, float | None], positions: dict[str, int], desc: bool) -> list[str]:
    """Reference order: by value (missing last either way), ties by position."""
    present = [i for i in positions if keys.get(i) is not None]
    missing = [i for i in positions if keys.get(i) is None]
    sign = -1 if desc else 1
    present.sort(key=lambda i: (sign * keys[i], positions[i]))  # type: ignore[operator]
    return present + sorted(missing, key=lambda i: positions[i])


def _quoted(items: list[str]) -> list[str]:
    return [unescape(quote(i, safe="")) for i in items]


def test_sort_by_a_final_score_cost_and_judge_minus_physicians(
    client: TestClient, viewer_store: ViewerStore
) -> None:
    s = viewer_store
    positions = _positions(s.db, s.single)
    accurate = _finals(s.db, s.single, "accurate")
    for desc in (True, False):
        got = _listed(client, f"/runs/{s.single}/?sort=score:accurate&desc={int(desc)}")
        assert got == _quoted(_ordered(accurate, positions, desc))
    medians = _medians(s.db, "accurate")
    diff = {
        i: accurate[i] - medians[i]  # type: ignore[operator]
        for i in positions
        if i in medians and accurate.get(i) is not None
    }
    assert len(diff) == len(RATED)
    assert _listed(client, f"/runs/{s.single}/?sort=diff:accurate") == _quoted(
        _ordered(dict(diff), positions, False)
    )
    absolute: dict[str, float | None] = {i: abs(v) for i, v in diff.items()}
    assert _listed(client, f"/runs/{s.single}/?sort=absdiff:accurate&desc=1") == _quoted(
        _ordered(absolute, positions, True)
    )
    costs: dict[str, float | None] = {}
    for item, cost in query(s.db, "SELECT item_id, cost_usd FROM calls WHERE run_id = ?",
                            [s.single]):  # fmt: skip
        if cost is not None:
            costs[item] = (costs.get(item) or 0.0) + cost
    latency: dict[str, float | None] = {}
    for item, t in query(s.db, "SELECT item_id, latency_s FROM calls WHERE run_id = ?",
                         [s.single]):  # fmt: skip
        latency[item] = (latency.get(item) or 0.0) + t
    assert _listed(client, f"/runs/{s.single}/?sort=latency&desc=1") == _quoted(
        _ordered(latency, positions, True)
    )
    if costs:
        assert _listed(client, f"/runs/{s.single}/?sort=cost&desc=1") == _quoted(
            _ordered(costs, positions, True)
        )


def test_physicians_median_stands_beside_each_attribute(
    client: TestClient, viewer_store: ViewerStore
) -> None:
    s = viewer_store
    html = client.get(f"/runs/{s.single}/?rated=1").text.split('id="items"')[1]
    medians = _medians(s.db, "thorough")
    finals = _finals(s.db, s.single, "thorough")
    rows = re.findall(r"<tr>\s*<td class=\"l\">\d+</td>(.*?)</tr>", html, re.S)
    assert len(rows) == len(RATED)  # has ratings: just the rated items
    column = 2 * _rubric_keys(s).index("thorough")  # a judge and a median column each
    for row in rows:
        item = re.search(r"/items/([^\"?]+)", row).group(1)  # type: ignore[union-attr]
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)[2:]  # after item and status
        judge, median = cells[column], cells[column + 1]
        assert re.sub("<.*?>", "", judge).strip() == f"{finals[item]:g}"
        assert 'class="human"' in row
        want = medians[item]
        assert median.strip() == (f"{want:g}" if float(want).is_integer() else f"{want:.2f}")


def _rubric_keys(s: ViewerStore) -> list[str]:
    import json

    (rubric,) = query(s.db, "SELECT rubric_json FROM runs WHERE run_id = ?", [s.single])[0]
    return [a["key"] for a in json.loads(rubric)["attributes"]]


def test_filters_combine_and_search_finds_ids_text_and_rationales(
    client: TestClient, viewer_store: ViewerStore
) -> None:
    s = viewer_store
    positions = _positions(s.db, s.single)
    accurate = _finals(s.db, s.single, "accurate")
    failed = {i for (i,) in query(s.db, "SELECT item_id FROM samples WHERE run_id = ? "
                                  "AND status <> 'ok'", [s.single])}  # fmt: skip
    at_least_3 = [
        i
        for i in sorted(positions, key=positions.get)  # type: ignore[arg-type]
        if accurate.get(i) is not None and accurate[i] >= 3
    ]  # type: ignore[operator]
    assert _listed(client, f"/runs/{s.single}/?where=accurate%3E%3D3") == _quoted(at_least_3)
    both = [i for i in at_least_3 if i in RATED]
    url = f"/runs/{s.single}/?where=accurate%3E%3D3&rated=1"
    assert _listed(client, url) == _quoted(both)
    # The form's three fields add a condition to those in the address.
    url = (f"/runs/{s.single}/?where=accurate%3E%3D3&where_attribute=accurate&where_op=%3C%3D"
           "&where_value=4")  # fmt: skip
    assert _listed(client, url) == _quoted([i for i in at_least_3 if accurate[i] <= 4])  # type: ignore[operator]
    assert _listed(client, f"/runs/{s.single}/?failed=1") == _quoted([FAILING_ID])
    assert FAILING_ID in failed
    assert _listed(client, f"/runs/{s.single}/?failed=1&flagged=1") == []
    assert _listed(client, f"/runs/{s.single}/?flagged=1") == _quoted([HOSTILE_ID])
    # Search: an item id, the summary's text, a rationale; % and _ are no wildcards.
    assert _listed(client, f"/runs/{s.single}/?q=ITEM-000") == _quoted(
        sorted((i for i in positions if i.startswith("item-000")), key=positions.get)  # type: ignore[arg-type]
    )
    assert _listed(client, f"/runs/{s.single}/?q=ignore+all+previous") == _quoted([HOSTILE_ID])
    assert _listed(client, f"/runs/{s.single}/?q={quote('svg onload=alert(3)')}") == _quoted(
        [HOSTILE_ID]
    )
    assert _listed(client, f"/runs/{s.single}/?q=item_0") == []
    assert _listed(client, f"/runs/{s.single}/?q=item%25x") == []
    note = query(s.db, "SELECT item_id FROM items WHERE run_id = ? AND notes::VARCHAR "
                 "LIKE '%Visit 2: </textarea>%'", [s.single])  # fmt: skip
    assert note  # only the source notes hold it: found when the notes are searched too
    text = quote("visit 2: </TEXTAREA>")
    assert _listed(client, f"/runs/{s.single}/?q={text}") == []
    assert _listed(client, f"/runs/{s.single}/?q={text}&in_notes=1") == _quoted(
        [i for (i,) in note]
    )
    # Text JSON escapes (a quote, a letter beyond ASCII) is found in the notes' text too.
    assert _listed(client, f"/runs/{s.single}/?q=%3Cb%3Ebold%3C%2Fb%3E+note&in_notes=1") == [
        HOSTILE_ID
    ]


def test_the_search_box_echoes_hostile_text_as_text(
    client: TestClient, viewer_store: ViewerStore
) -> None:
    s = viewer_store
    hostile = "\"><script>alert('q')</script><img src=x onerror=alert(2)>"
    html = client.get(f"/runs/{s.single}/?q={quote(hostile)}").text
    assert "<script>alert(" not in html and "<img src=x" not in html
    assert html.count("&lt;script&gt;alert(&#39;q&#39;)&lt;/script&gt;") >= 2  # box and chip
    assert 'value="&#34;&gt;&lt;script&gt;' in html  # the attribute cannot be closed
    assert re.findall(r"<script\b[^>]*>", html) == ['<script src="/static/viewer.js" defer>']
    # Links carrying the state encode it.
    assert "q=%22%3E%3Cscript%3E" in html or "No items" in html


def test_bad_query_parameters_are_a_clear_400(
    client: TestClient, viewer_store: ViewerStore
) -> None:
    s = viewer_store
    cases = {
        "sort=nonsense": "unknown sort key 'nonsense'",
        "sort=score:nope": "unknown attribute 'nope'",
        "sort=score": "name the attribute",
        "sort=cost:accurate": "takes no attribute",
        "sort=score:accurate%3BDROP%20TABLE%20items": "unknown attribute",
        "where=accurate%3D3": "ATTRIBUTE<=VALUE",
        "where=nope%3E%3D3": "unknown attribute 'nope'",
        "where=accurate%3E%3Dabc": "not a number",
        "where_attribute=accurate&where_op=%3D%3D&where_value=2": "comparison",
        "desc=maybe": "say 1 or 0",
        "show=everything": "one of all, failed, flagged",
        "colour=red": "unknown query parameter 'colour'",
        "q=" + "x" * 501: "at most 500",
    }
    for params, message in cases.items():
        for url in (f"/runs/{s.single}/?{params}", f"/runs/{s.single}/items/item-0000?{params}"):
            response = client.get(url)
            assert response.status_code == 400, url
            assert message in unescape(response.text), (url, response.text[-600:])
    assert query(s.db, "SELECT count(*) FROM items")[0][0] > 0
    response = client.get(f"/compare?run={s.single}&run={s.panel}&sort=bogus")
    assert response.status_code == 400 and "unknown sort key 'bogus'" in unescape(response.text)
    response = client.get(f"/compare?run={s.single}&run={s.panel}&sort=spread:nope")
    assert response.status_code == 400 and "unknown attribute 'nope'" in unescape(response.text)


def test_item_pages_step_through_the_sorted_filtered_list(
    client: TestClient, viewer_store: ViewerStore
) -> None:
    s = viewer_store
    state = "sort=score%3Aaccurate&desc=1&where=accurate%3E%3D1"
    order = _listed(client, f"/runs/{s.single}/?{state}")
    assert len(order) >= 3
    # The list's links carry its state, and each item's previous/next follow the list.
    html = client.get(f"/runs/{s.single}/?{state}").text.split('id="items"')[1]
    assert f"/items/{order[0]}?sort=score%3Aaccurate&amp;desc=1&amp;where=accurate%3E%3D1" in html
    for k, item in enumerate(order):
        page = client.get(f"/runs/{s.single}/items/{item}?{state}").text
        nxt = re.search(r'id="item-next" href="/runs/[^/]+/items/([^"?]+)\?([^"]*)"', page)
        prev = re.search(r'id="item-prev" href="/runs/[^/]+/items/([^"?]+)\?([^"]*)"', page)
        assert (nxt.group(1) if nxt else None) == (order[k + 1] if k + 1 < len(order) else None)
        assert (prev.group(1) if prev else None) == (order[k - 1] if k else None)
        for link in (nxt, prev):
            if link:
                assert unescape(link.group(2)) == unescape(state.replace("%3A", ":")) or (
                    unescape(link.group(2)).replace(":", "%3A") == state
                )
        assert f"item {k + 1} of {len(order)} in" in page
    # An item the filters leave out says so and has no neighbours in that list.
    accurate = _finals(s.db, s.single, "accurate")
    low = min((v, i) for i, v in accurate.items() if v is not None)
    page = client.get(f"/runs/{s.single}/items/{low[1]}?where=accurate%3E%3D{low[0] + 1:g}").text
    assert "not in" in page and 'id="item-next"' not in page


def test_compare_shows_the_physicians_median_and_sorts(
    client: TestClient, viewer_store: ViewerStore
) -> None:
    s = viewer_store
    html = client.get(f"/compare?run={s.single}&run={s.panel}").text
    assert "physicians&#39; median" in html
    medians = _medians(s.db, "accurate")
    shared = [i for (i,) in query(s.db, "SELECT item_id FROM items WHERE run_id = ? INTERSECT "
                                  "SELECT item_id FROM items WHERE run_id = ?",
                                  [s.single, s.panel])]  # fmt: skip
    for item in shared:
        if item in medians:
            block = html.split(f">{item}</a>")[-1].split('class="first"')[0]
            row = re.search(r'<td class="l">accurate</td>(.*?)</tr>', block, re.S)
            assert row is not None
            cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)
            want = medians[item]
            assert cells[-1] == (f"{want:g}" if float(want).is_integer() else f"{want:.2f}")
    by_item = client.get(f"/compare?run={s.single}&run={s.panel}&sort=item&desc=0").text
    got = re.findall(r'<td class="l item"[^>]*><a href="/runs/[^/]+/items/([^"?]+)"', by_item)
    assert got == sorted(shared)
    # Sorted by one attribute's spread between the runs, largest first.
    finals = {r: _finals(s.db, r, "accurate") for r in (s.single, s.panel)}
    spread = {i: abs(finals[s.single][i] - finals[s.panel][i]) for i in shared}  # type: ignore[operator]
    html = client.get(f"/compare?run={s.single}&run={s.panel}&sort=spread:accurate").text
    got = re.findall(r'<td class="l item"[^>]*><a href="/runs/[^/]+/items/([^"?]+)"', html)
    assert [spread[i] for i in got] == sorted(spread.values(), reverse=True)


def test_repeated_prompts_are_shown_once_and_claim_transcripts_fold() -> None:
    system = "You are a physician reviewer. " * 5
    claim = "STATEMENT\n<STATEMENT>\nShe quit smoking.\n</STATEMENT>"
    views = [
        SampleView(1, turns=[Turn("judge", "system", system), Turn("judge", "user", claim),
                             Turn("judge", "assistant", "1")]),
        SampleView(2, turns=[Turn("judge", "system", system), Turn("judge", "user", "other"),
                             Turn("judge", "assistant", "0")]),
    ]  # fmt: skip
    number_turns(views)
    first, repeated = views[0].turns[0], views[1].turns[0]
    assert (first.number, repeated.number) == (1, 4)
    assert repeated.same_as is first and first.same_as is None
    assert views[1].turns[1].same_as is None  # short and different: shown
    folded = exchanges(views[0])
    assert len(folded) == 1 and folded[0]["gist"] == "STATEMENT · She quit smoking."
    assert [t.role for t in folded[0]["turns"]] == ["system", "user", "assistant"]


def test_hostile_rationale_found_by_search_is_shown_literally(
    client: TestClient, viewer_store: ViewerStore
) -> None:
    s = viewer_store
    page = client.get(f"/runs/{s.single}/items/{HOSTILE_ID}?q=svg").text
    assert HOSTILE_RATIONALE not in page  # never raw
    assert "&lt;svg onload=alert(3)&gt;" in page


def test_search_reads_the_notes_text_not_their_json(tmp_path: Path) -> None:
    """Words JSON escapes (quotes, letters beyond ASCII, a backslash) are found as written,
    and the JSON's own keys are not text of the notes."""
    import json

    from clinjudge.reports._viewer_paging import page_window
    from clinjudge.runs import RunStore
    from clinjudge.runs.report_reads import ItemFilter, run_items

    notes = {
        "a": [{"id": "1", "text": 'Pt said "no pain"; café au lait spots'}],
        "b": [{"id": "1", "text": "path C:\\temp\\x and 50% better"}],
        "c": [{"id": "text", "text": "nothing here"}],
    }
    with RunStore(tmp_path / "s.duckdb") as store:
        for n, (item, text) in enumerate(notes.items()):
            store.con.execute(
                "INSERT INTO items (run_id, item_id, position, notes, summary) "
                "VALUES ('r', ?, ?, ?, 'summary')",
                [item, n, json.dumps(text)],
            )

        def found(text: str) -> list[str]:
            search = ItemFilter(text=text, in_notes=True)
            _, rows = run_items(store, "r", page_window(1, 10), filters=search)
            return [r["item_id"] for r in rows]

        assert found('"NO PAIN"') == ["a"]
        assert found("CAFÉ") == ["a"]
        assert found("c:\\temp") == ["b"]
        assert found("50%") == ["b"] and found("5_%") == []
        assert found("text") == [] and found('"id"') == []
        assert found("nothing") == ["c"]


def test_prm_steps_without_text_are_labelled(viewer_store: ViewerStore, tmp_path: Path) -> None:
    """Completeness and end-of-note steps score the note's structure and have no text: their
    rows say what they are instead of standing blank."""
    s = viewer_store
    if s.prm is None:
        pytest.skip("the PRM runs need torch")
    db = tmp_path / "copy.duckdb"
    db.write_bytes(s.db.read_bytes())
    import duckdb

    con = duckdb.connect(str(db))
    try:
        ((step, model),) = con.execute(
            "SELECT max(step), any_value(model) FROM prm_steps WHERE run_id = ? "
            "AND item_id = 'prm-0000'",
            [s.prm],
        ).fetchall()
        for n, kind in enumerate(("problem_completeness", "note_completeness", "end_of_note")):
            con.execute(
                "INSERT INTO prm_steps SELECT run_id, item_id, candidate, ?, ?, '', 0.5, false, "
                "NULL, model FROM prm_steps WHERE run_id = ? AND item_id = 'prm-0000' LIMIT 1",
                [step + 1 + n, kind, s.prm],
            )
    finally:
        con.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        page = TestClient(create_app(db, n_boot=20)).get(f"/runs/{s.prm}/items/prm-0000").text
    table = page.split('class="steps"')[1].split("</table>")[0]
    rows = re.findall(r"<tr class=\"([^\"]*)\"><td>(\d+)</td>.*?<td class=\"l wide\">(.*?)</td>",
                      table, re.S)  # fmt: skip
    labelled = {int(n): re.sub("<.*?>", "", cell) for cls, n, cell in rows if "structural" in cls}
    assert labelled == {
        step + 1: "problem completeness: is the problem above complete?",
        step + 2: "note completeness: does the note leave out a problem?",
        step + 3: "end of note",
    }
    assert model is not None
