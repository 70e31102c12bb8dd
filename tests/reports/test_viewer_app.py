"""`judge view` over HTTP without a browser: headers, read-only access, a locked database,
paging and filters, the static export's folder rules, and the command line."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clinjudge.reports import ExportError, create_app, export_site, is_loopback
from tests.cli._helpers import JUDGE, invoke, query
from tests.reports._store import FAILING_ID, HOSTILE_ID, ViewerStore

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient


@pytest.fixture(scope="module")
def client(viewer_store: ViewerStore) -> Iterator[TestClient]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield TestClient(create_app(viewer_store.db, n_boot=50, items_per_page=2))


def _client_on_copy(viewer_store: ViewerStore, tmp_path: Path) -> tuple[Path, TestClient]:
    """A viewer over a copy of the test store, for tests that write to the database."""
    db = tmp_path / "copy.duckdb"
    db.write_bytes(viewer_store.db.read_bytes())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return db, TestClient(create_app(db, n_boot=20))


def _pages(s: ViewerStore) -> list[str]:
    runs = [s.single, s.magentic, s.doclens, s.audit] + [r for r in (s.prm, s.prm_score) if r]
    items = query(s.db, "SELECT run_id, item_id FROM items WHERE run_id IN (?, ?, ?)",
                  [s.single, s.magentic, s.doclens])  # fmt: skip
    return [
        "/",
        "/?sort=name&desc=0&q=fake",
        *[f"/runs/{r}/" for r in runs],
        f"/runs/{s.single}/?show=failed",
        f"/runs/{s.audit}/audit",
        f"/compare?run={s.single}&run={s.magentic}",
        *[f"/runs/{r}/items/{i}" for r, i in items],
    ]


def test_every_page_sends_a_policy_that_forbids_inline_script(
    client: TestClient, viewer_store: ViewerStore
) -> None:
    for path in [*_pages(viewer_store), "/runs/nope/", "/static/viewer.js"]:
        response = client.get(path)
        assert response.status_code in (200, 404), path
        policy = response.headers["content-security-policy"]
        directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
        assert directives["script-src"] == "'self'" and directives["default-src"] == "'none'"
        assert "unsafe" not in policy
        assert response.headers["x-content-type-options"] == "nosniff"
        if response.headers["content-type"].startswith("text/html"):
            html = response.text
            assert '<meta http-equiv="Content-Security-Policy"' in html
            # Nothing is loaded from another origin, and no inline script or handler exists.
            assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", html), path
            assert re.findall(r"<script\b[^>]*>", html) == [
                '<script src="/static/viewer.js" defer>'
            ]
            assert not re.search(r"<[^>]+\son\w+\s*=", html), path
            assert " style=" not in html


def _fingerprint(db: Path) -> tuple[str, int, list[str]]:
    return (
        hashlib.sha256(db.read_bytes()).hexdigest(),
        db.stat().st_mtime_ns,
        sorted(p.name for p in db.parent.iterdir() if p.name.startswith(db.name)),
    )


def test_viewing_and_exporting_never_write_the_database(
    client: TestClient, viewer_store: ViewerStore, tmp_path: Path
) -> None:
    before = _fingerprint(viewer_store.db)
    for path in _pages(viewer_store):
        assert client.get(path).status_code == 200, path
    export_site(viewer_store.db, tmp_path / "site", n_boot=20)
    assert _fingerprint(viewer_store.db) == before


_HOLD = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])
con.execute("CREATE TABLE IF NOT EXISTS lock_probe (x INTEGER)")
print("locked", flush=True)
sys.stdin.readline()
con.close()
"""


def test_a_database_held_by_a_writer_gets_a_retry_page(
    viewer_store: ViewerStore, tmp_path: Path
) -> None:
    db, client = _client_on_copy(viewer_store, tmp_path)
    writer = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "locked"
        for path in ("/", f"/runs/{viewer_store.single}/"):
            busy = client.get(path)
            assert busy.status_code == 503
            assert "Database busy" in busy.text and "in use by another process" in busy.text
            assert busy.headers["retry-after"] == "3"
            assert '<meta http-equiv="refresh" content="3">' in busy.text
    finally:
        assert writer.stdin is not None
        writer.stdin.write("\n")
        writer.stdin.flush()
        writer.wait(timeout=30)
    assert client.get("/").status_code == 200  # the next try succeeds


def test_item_list_is_paged_and_filtered_in_the_database(
    client: TestClient, viewer_store: ViewerStore
) -> None:
    s = viewer_store
    order = [r[0] for r in query(s.db, "SELECT item_id FROM items WHERE run_id = ? "
                                 "ORDER BY position", [s.single])]  # fmt: skip
    seen = []
    for page in (1, 2, 3):
        html = client.get(f"/runs/{s.single}/?page={page}").text
        assert f"page {page} of 3" in html
        seen += re.findall(r'<a href="/runs/[^/]+/items/([^"]+)">', html.split('id="items"')[1])
    assert seen == order
    # An item link carries the list's state (its previous/next follow the list): ?failed=1.
    failed = client.get(f"/runs/{s.single}/?show=failed").text.split('id="items"')[1]
    assert re.findall(r"/items/([^\"?]+)\?failed=1\"", failed) == [FAILING_ID]
    flagged = client.get(f"/runs/{s.single}/?show=flagged").text.split('id="items"')[1]
    assert re.findall(r"/items/([^\"?]+)\?flagged=1\"", flagged) == [HOSTILE_ID]


def test_runs_page_sorts_and_filters(client: TestClient, viewer_store: ViewerStore) -> None:
    s = viewer_store

    def listed(url: str) -> list[str]:
        return re.findall(r'<a href="/runs/([^/]+)/">', client.get(url).text)

    assert listed("/?q=doclens") == [s.doclens]
    assert listed("/?q=DocLens+MOCK") == [s.doclens]
    assert listed("/?q=d_clens") == [] and listed("/?q=doc%25") == []  # no LIKE wildcards
    names = dict(query(s.db, "SELECT run_id, name FROM runs"))
    named = sorted(n for n in names.values() if n is not None)
    unnamed = [None] * (len(names) - len(named))  # runs without a name come last either way
    assert [names[r] for r in listed("/?sort=name&desc=0")] == named + unnamed
    assert [names[r] for r in listed("/?sort=name&desc=1")] == named[::-1] + unnamed
    assert listed("/?status=nonsense") == []


def test_export_folder_rules(viewer_store: ViewerStore, tmp_path: Path) -> None:
    s = viewer_store
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(ExportError, match="not empty"):
        export_site(s.db, foreign, runs=[s.doclens], n_boot=20)
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    export_site(s.db, foreign, runs=[s.doclens], n_boot=20, force=True)
    assert (foreign / "notes.txt").read_text() == "keep me" and (foreign / "index.html").exists()

    site = tmp_path / "site"
    first = export_site(s.db, site, runs=[s.single], n_boot=20)
    assert first.pages == 1 + 1 + 5  # runs page, the run's page, its five items
    assert len(list(site.rglob("*.html"))) == first.pages
    (site / "stale.html").write_text("old")
    export_site(s.db, site, runs=[s.doclens], n_boot=20)  # a previous export is replaced
    assert (site / "stale.html").read_text() == "old"  # the user's file: kept
    assert not any(s.single in str(p) for p in site.rglob("*"))
    assert not list(tmp_path.glob(".site-*"))  # no temporary folder left behind


def test_view_command_exports_and_checks_its_flags(
    viewer_store: ViewerStore, tmp_path: Path
) -> None:
    s = viewer_store
    result = invoke(
        "view", "--db", str(s.db), "--export", str(tmp_path / "out"), "--run", s.doclens
    )
    assert result.exit_code == 0, result.stderr
    assert "wrote" in result.stderr and (tmp_path / "out" / "index.html").exists()
    assert invoke("view", "--db", str(s.db), "--run", s.doclens).exit_code == 2
    missing = invoke("view", "--db", str(tmp_path / "none.duckdb"))
    assert missing.exit_code == 2 and "no such database" in missing.stderr


def test_listening_beyond_loopback_warns(viewer_store: ViewerStore) -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5")
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    proc = subprocess.Popen(
        [JUDGE, "view", "--db", str(viewer_store.db), "--host", "0.0.0.0", "--port", "0"],
        stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        lines = []
        deadline = time.monotonic() + 60
        assert proc.stderr is not None
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            lines.append(line)
            if "judge view: http" in line or not line:
                break
        text = "".join(lines)
        assert "warning" in text and "clinical text" in text, text
        assert "judge view: http://0.0.0.0:" in text
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_run_totals_match_judge_runs_show(viewer_store: ViewerStore) -> None:
    """The viewer's cheaper scans give the numbers of `runs show` (run_summary)."""
    from clinjudge.analysis import run_summary
    from clinjudge.reports._viewer_run import run_and_rubric, run_totals
    from clinjudge.runs import RunStore

    s = viewer_store
    with RunStore(s.db, read_only=True) as store:
        for run_id in filter(None, (s.single, s.magentic, s.doclens, s.audit, s.prm)):
            run, rubric = run_and_rubric(store, run_id)
            ours = run_totals(store, run_id, rubric)
            reference = run_summary(store, run_id).to_dict()
            for key in ("items_ok", "items_failed", "samples_ok", "samples_failed", "calls",
                        "calls_failed", "tokens_in", "tokens_out", "calls_unpriced",
                        "item_latency_p50_s", "item_latency_p95_s"):  # fmt: skip
                assert ours[key] == pytest.approx(reference[key]), (run_id, key)
            assert [
                {**a, "latency_s_sum": round(a["latency_s_sum"], 9)} for a in ours["by_agent"]
            ] == [
                {**a, "latency_s_sum": round(a["latency_s_sum"], 9)} for a in reference["by_agent"]
            ]


def test_item_page_numbers_retried_attempts(tmp_path: Path) -> None:
    from tests.factories import make_items, write_jsonl
    from tests.fake_openai import FakeOpenAIServer, Fault

    db = tmp_path / "retry.duckdb"
    data = write_jsonl(tmp_path / "one.jsonl", make_items(1))
    with FakeOpenAIServer(faults=[Fault("server_error"), Fault("server_error")]) as srv:
        result = invoke("run", "--data", str(data), "--model", "openai/local-judge",
                        "--base-url", srv.base_url, "--db", str(db), "--no-progress")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    run_id = result.stdout.strip().splitlines()[-1]
    statuses = [r[0] for r in query(db, "SELECT status FROM calls ORDER BY seq")]
    assert statuses == ["error", "error", "ok"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        html = TestClient(create_app(db)).get(f"/runs/{run_id}/items/item-0000").text
    table = html.split('<table class="calls">')[1].split("</table>")[0]
    attempts = re.findall(r'<td class="(?:bad)?">(\d)(?: \(retry\))?</td>', table)
    assert attempts == ["1", "2", "3"]


def test_prm_scoring_run_lists_its_scored_items(
    client: TestClient, viewer_store: ViewerStore
) -> None:
    s = viewer_store
    if s.prm_score is None:
        pytest.skip("needs torch (the prm extra)")
    html = client.get(f"/runs/{s.prm_score}/").text
    assert re.findall(r"/items/([^\"]+)\"", html.split('id="items"')[1]) == ["q1", "q2"]
    page = client.get(f"/runs/{s.prm_score}/items/q2")
    assert page.status_code == 200
    steps = query(s.db, "SELECT text, score FROM prm_steps WHERE run_id = ? AND item_id = 'q2'",
                  [s.prm_score])  # fmt: skip
    ((text, score),) = steps
    assert "only &lt;b&gt;one&lt;/b&gt;" in page.text and f"step score {score:.3f}" in page.text


def test_runs_page_counts_items_like_runs_show(
    client: TestClient, viewer_store: ViewerStore
) -> None:
    from clinjudge.analysis import run_summary
    from clinjudge.reports._viewer_runs import runs_page
    from clinjudge.runs import RunStore

    with RunStore(viewer_store.db, read_only=True) as store:
        for run in runs_page(store, per_page=100)["runs"]:
            reference = run_summary(store, run["run_id"]).to_dict()
            assert run.get("items_ok", 0) == reference["items_ok"], run["run_id"]
            assert run.get("items_failed", 0) == reference["items_failed"], run["run_id"]


def test_cached_run_summaries_follow_writes_to_the_database(
    viewer_store: ViewerStore, tmp_path: Path
) -> None:
    import duckdb

    db, client = _client_on_copy(viewer_store, tmp_path)
    page = f"/runs/{viewer_store.single}/"
    assert "invalid reply" in client.get(page).text
    assert "a reason written later" not in client.get(page).text  # served from the cache
    con = duckdb.connect(str(db))
    con.execute(
        "UPDATE samples SET error = 'a reason written later' WHERE run_id = ? AND status <> 'ok'",
        [viewer_store.single],
    )
    con.close()
    assert "a reason written later" in client.get(page).text


def test_run_page_draws_judge_minus_physician_differences(
    client: TestClient, viewer_store: ViewerStore
) -> None:
    s = viewer_store
    html = client.get(f"/runs/{s.single}/").text
    svg = html.split('aria-label="accurate: judge minus physicians&#x27; median"')[1]
    svg = svg.split("</svg>")[0]
    # Reference: final judge score minus the median of the two physicians, per rated item.
    finals = dict(query(s.db, "SELECT item_id, value FROM judgments WHERE run_id = ? AND final "
                        "AND attribute = 'accurate'", [s.single]))  # fmt: skip
    diffs: dict[float, int] = {}
    for item in {r["item_id"] for r in s.ratings}:
        humans = [
            r["score"] for r in s.ratings if r["item_id"] == item and r["attribute"] == "accurate"
        ]
        if finals.get(item) is not None:
            d = finals[item] - sum(humans) / len(humans)
            diffs[d] = diffs.get(d, 0) + 1
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    for value, count in diffs.items():
        label = f"{value:g}"
        assert label in texts and str(count) in texts, (label, count, texts)


def test_a_database_from_an_older_version_still_opens(
    viewer_store: ViewerStore, tmp_path: Path
) -> None:
    import duckdb

    db = tmp_path / "old.duckdb"
    db.write_bytes(viewer_store.db.read_bytes())
    con = duckdb.connect(str(db))
    con.execute("DROP TABLE prm_steps")
    con.execute("DROP TABLE claims")
    con.execute("ALTER TABLE items DROP COLUMN flags")
    con.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        client = TestClient(create_app(db, n_boot=20))
    s = viewer_store
    for path in (
        "/",
        f"/runs/{s.single}/",
        f"/runs/{s.single}/?show=flagged",
        f"/runs/{s.single}/items/item-0000",
        f"/runs/{s.magentic}/items/item-0001",
    ):
        assert client.get(path).status_code == 200, path  # fmt: skip


def test_doclens_run_page_shows_the_pooled_metrics_per_section(
    client: TestClient, viewer_store: ViewerStore
) -> None:
    page = client.get(f"/runs/{viewer_store.doclens}/").text
    # Expected from the stored claims, counted independently of the report code.
    rows = query(
        viewer_store.db,
        "SELECT count(*) FILTER (WHERE verdict = 'entailed'), count(*) FROM claims "
        "WHERE run_id = ? AND kind = 'recall' AND agent = 'judge'",
        [viewer_store.doclens],
    )
    entailed, total = rows[0]
    assert total > 0
    assert "claim_recall" in page and "total" in page
    assert f"{entailed / total:.3f}" in page


def test_run_page_histograms_hold_every_final_score(viewer_store: ViewerStore) -> None:
    """Each attribute's bins add up to the items with a stored final number; the rest are
    counted as without a score; integer scales get one bin per scale point."""
    from clinjudge.analysis import score_distributions
    from clinjudge.reports._viewer_run import distribution_charts, run_and_rubric
    from clinjudge.runs import RunStore

    s = viewer_store
    with RunStore(s.db, read_only=True) as store:
        _, rubric = run_and_rubric(store, s.single)
        assert rubric is not None
        charts = distribution_charts(score_distributions(store, s.single, rubric))
    assert [c["key"] for c in charts] == list(rubric.keys)
    for chart, attribute in zip(charts, rubric.attributes, strict=True):
        values = [
            v
            for (v,) in query(
                s.db,
                "SELECT value FROM judgments WHERE run_id = ? AND final AND attribute = ?",
                [s.single, attribute.key],
            )
        ]
        numbers = [v for v in values if v is not None]
        assert sum(n for _, n in chart["bins"]) == len(numbers) == chart["n"]
        assert chart["missing"] == len(values) - len(numbers)
        if numbers and all(float(v).is_integer() for v in numbers):
            assert [label for label, _ in chart["bins"]] == [
                str(p) for p in range(int(attribute.min), int(attribute.max) + 1)
            ]
            for label, n in chart["bins"]:
                assert n == sum(1 for v in numbers if int(v) == int(label))


def test_run_page_shows_the_personas_stored_with_the_run(
    viewer_store: ViewerStore, tmp_path: Path
) -> None:
    """The personas come from the run (config.personas_data), never from the set's file as it
    reads now: a run that stored only the set's name says so and shows no wording."""
    import duckdb

    s = viewer_store
    db, client = _client_on_copy(viewer_store, tmp_path)
    page = f"/runs/{s.magentic}/"
    html = client.get(page).text
    assert "as the run used it (stored with the run)" in html
    assert "high_scorer" in html and "low_scorer" in html

    def rewrite(change: Any) -> str:
        con = duckdb.connect(str(db))
        (raw,) = con.execute("SELECT config FROM runs WHERE run_id = ?", [s.magentic]).fetchone()
        config = json.loads(raw)
        change(config)
        con.execute("UPDATE runs SET config = ? WHERE run_id = ?", [json.dumps(config), s.magentic])
        con.close()
        return client.get(page).text

    reworded: list[str] = []

    def reword(config: dict[str, Any]) -> None:
        for persona in config["personas_data"]["personas"]:
            persona["system_message"] = "Stored wording. End with the rubric JSON."
            reworded.append(persona["name"])

    html = rewrite(reword)
    stored = '<pre class="text">Stored wording. End with the rubric JSON.</pre>'
    assert html.count(stored) == len(reworded) >= 2  # every persona, as stored

    html = rewrite(lambda config: config.pop("personas_data"))  # as an older clinjudge stored it
    assert "this run recorded only the set&#39;s name, not its wording" in html
    assert "wording fingerprint" not in html  # no table re-derived from the built-in set
