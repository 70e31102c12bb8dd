"""Speed of `judge view` pages on a 100,000-item run, against bare DuckDB queries of their rows.

Builds (once, cached under --work) a run store holding one single-judge PDSQI-9 run of
``--items`` items with ``--samples`` samples each: items with three short notes, judgments
(every sample and the final per attribute), samples, calls and transcripts (system, user and
assistant messages), about 1% failed samples and 0.5% flagged items. Rows are written in bulk by
DuckDB itself (``INSERT ... SELECT FROM range(n)``), not through the runner.

Then times, through the viewer's ASGI app (Starlette TestClient; pages read the viewer's private
copy of the database, as in `judge view`): the run page on first view (the viewer's cache
emptied, so the run's aggregates are computed afresh), then again and on a deep page of its item
list (the aggregates are cached while the file is unchanged; only the item page is queried), and
item pages (first, middle, last and random items). Each is compared with a bare DuckDB query of
the same rows: connect read-only, then select the rows the page shows (the run page: its 100
items and their final scores; an item page: the item's rows of items, judgments, samples, calls
and messages; the first view of the run page: also the aggregates it shows, written as plain SQL
here). Prints the median of ``--repeats`` timings after one warm-up (page and bare query timed
alternately, so both see the same load on a shared machine), and the ratio.

Then (issue 25) the item list sorted by a final score, by |judge - physicians' median| (every
hundredth item has three physicians' ratings), by cost, filtered (failed and a score bound,
sorted by latency) and searched (ids, text and rationales; and with the source notes, which
are most of the run's text), and an item page opened from a sorted,
filtered list (its previous and next items found in that list), each against plain DuckDB SQL
of the same page (count, one window of 100 and their final scores).

Target (issues 12 and 25): the run page, any item page and any sorted or filtered page of the
item list under 300 ms on this machine.

With ``--export``: the static export (`judge view --export`) of a run of ``--items`` items
(default 50,000), in one run of this script: the old way, every page rendered by the live
viewer's page functions one at a time (about ten queries per item page), over ``--sample`` item
pages spread across the run plus the runs page and the first run pages; then the export as it
is (``export_site``: item pages from rows read 400 items at a time), of the whole run. Prints
pages/s of each and the ratio, and checks that the sampled pages are byte-for-byte the same.

Usage: python bench/viewer.py [--items 100000] [--samples 3] [--repeats 15] [--work DIR]
       python bench/viewer.py --export [--items 50000] [--sample 2000] [--work DIR]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from clinjudge.reports import Viewer, create_app, export_site  # noqa: E402
from clinjudge.reports._viewer_links import ExportLinks, item_page_path, run_page_path  # noqa: E402
from clinjudge.rubrics import load_rubric  # noqa: E402
from clinjudge.runs import RunStore  # noqa: E402

RUN_ID = "bench-viewer-run"
KEYS = [a.key for a in load_rubric("pdsqi9").attributes]


def build(db: Path, items: int, samples: int) -> None:
    """Write the benchmark run in bulk (a few seconds per 100,000 items)."""
    rubric = load_rubric("pdsqi9")
    with RunStore(db) as store:
        con = store.con
        con.execute(
            "INSERT INTO runs (run_id, name, created_at, updated_at, finished_at, status, mode, "
            "rubric, rubric_version, rubric_json, models, config, versions, data_source, "
            "simulated, n_items, n_samples) VALUES (?, 'bench viewer', now(), now(), now(), "
            "'completed', 'single', 'pdsqi9', ?, ?, '{\"judge\": \"openai/bench\"}', "
            "'{\"mode\": \"single\"}', '{}', 'bench', false, ?, ?)",
            [RUN_ID, rubric.version, rubric.model_dump_json(), items, samples],
        )
        con.execute(
            """
            INSERT INTO items (run_id, item_id, position, notes, summary, specialty, reference,
              vendor, meta, flags) SELECT ?, printf('item-%06d', i), i,
              json_array(
                json_object('id', '1', 'text', 'Visit 1 for patient ' || i || '. ' || repeat('History and exam text. ', 20)),
                json_object('id', '2', 'text', 'Visit 2: labs ' || (i % 97) || '. ' || repeat('Lab values and plan. ', 20)),
                json_object('id', '3', 'text', 'Visit 3: follow-up. ' || repeat('Medication changes. ', 20))),
              'Summary of patient ' || i || ' [Note 1] with plan [Note 3]. ' || repeat('Findings. ', 15),
              'Primary Care', NULL, NULL, '{}',
              CASE WHEN i % 200 = 7 THEN '[{"name": "score_request", "field": "summary", "match": "score 5"}]'
                   ELSE '[]' END
            FROM range(?) t(i)""",  # noqa: E501
            [RUN_ID, items],
        )
        # Sample s of item i fails when (i * 7 + s) % 100 == 0: about 1% of samples.
        con.execute(
            """
            INSERT INTO samples (run_id, item_id, sample, agent, status, error, raw_text,
              rationale, n_calls, latency_s, finished_at)
            SELECT ?, printf('item-%06d', i), s, 'judge',
              CASE WHEN (i * 7 + s) % 100 = 0 THEN 'failed' ELSE 'ok' END,
              CASE WHEN (i * 7 + s) % 100 = 0 THEN 'invalid reply: citation=9 is outside 1..5' END,
              NULL, 'The summary cites its notes; sample ' || s || ' of item ' || i || '.',
              1, 0.5 + (i % 13) / 10.0, now()
            FROM range(?) t(i), range(1, ? + 1) u(s)""",
            [RUN_ID, items, samples],
        )
        keys = "[" + ", ".join(f"'{k}'" for k in KEYS) + "]"
        con.execute(
            f"""
            INSERT INTO judgments (run_id, item_id, sample, agent, attribute, value, final,
              status, error, rationale) SELECT ?, printf('item-%06d', i), s, 'judge', k,
              CASE WHEN (i * 7 + s) % 100 = 0 THEN NULL ELSE 1 + (i * 31 + s * 7 + ki) % 5 END,
              false, CASE WHEN (i * 7 + s) % 100 = 0 THEN 'failed' ELSE 'ok' END, NULL,
              'Reason for ' || k
            FROM range(?) t(i), range(1, ? + 1) u(s),
                 (SELECT unnest({keys}) AS k, generate_subscripts({keys}, 1) AS ki)""",
            [RUN_ID, items, samples],
        )
        con.execute(
            f"""
            INSERT INTO judgments (run_id, item_id, sample, agent, attribute, value, final,
              status, error, rationale) SELECT ?, printf('item-%06d', i), 0, 'final', k,
              1 + (i * 31 + ki) % 5, true, 'ok', NULL, 'median of valid samples'
            FROM range(?) t(i), (SELECT unnest({keys}) AS k, generate_subscripts({keys}, 1) AS ki)""",  # noqa: E501
            [RUN_ID, items],
        )
        con.execute(
            """
            INSERT INTO calls (call_id, run_id, item_id, sample, seq, role, agent, model,
              prompt_tokens, completion_tokens, tokens_estimated, cost_usd, latency_s, status,
              error, finish_reason, started_at)
            SELECT ? || '/' || printf('item-%06d', i) || '/' || s || '/judge/0',
              ?, printf('item-%06d', i), s, 0, 'judge', 'judge', 'openai/bench',
              1500 + i % 300, 120 + i % 40, false, 0.0004, 0.4 + (i % 17) / 10.0,
              CASE WHEN (i * 7 + s) % 100 = 0 THEN 'error' ELSE 'ok' END, NULL, 'stop', now()
            FROM range(?) t(i), range(1, ? + 1) u(s)""",
            [RUN_ID, RUN_ID, items, samples],
        )
        con.execute(
            """
            INSERT INTO message_rows (run_id, item_id, sample, agent, seq, role, content)
            SELECT ?, printf('item-%06d', i), s, 'judge', m,
              ['system', 'user', 'assistant'][m + 1],
              CASE m WHEN 0 THEN 'You are an experienced physician grading a summary.'
                     WHEN 1 THEN 'DOCUMENT ' || i || ' ' || repeat('notes and summary ', 25)
                     ELSE '{"citation": 3, "accurate": 4, "rationale": "ok"}' END
            FROM range(?) t(i), range(1, ? + 1) u(s), range(3) v(m)""",
            [RUN_ID, items, samples],
        )
        # Physicians' ratings of every hundredth item (1,000 of 100,000), three raters, every
        # attribute: the item list shows their median beside each attribute and sorts by judge
        # minus median.
        con.execute(
            f"""
            INSERT INTO human_ratings (item_id, rater_id, attribute, score, rubric, source,
              imported_at)
            SELECT printf('item-%06d', i), 'phys-' || r, k, 1 + (i * 13 + r * 5 + ki) % 5,
              'pdsqi9', 'bench', now()
            FROM range(0, ?, 100) t(i), range(3) u(r),
                 (SELECT unnest({keys}) AS k, generate_subscripts({keys}, 1) AS ki)""",
            [items],
        )
        con.execute("CHECKPOINT")


def _paired_medians(viewer, bare, repeats: int) -> tuple[float, float]:
    """Median ms of each, timed alternately so both see the same machine load."""
    viewer(), bare()  # warm-up: template compilation, file cache
    ours, base = [], []
    for _ in range(repeats):
        for fn, out in ((viewer, ours), (bare, base)):
            start = time.perf_counter()
            fn()
            out.append((time.perf_counter() - start) * 1000)
    return statistics.median(ours), statistics.median(base)


def _bare_run_page(db: Path, page: int) -> None:
    con = duckdb.connect(str(db), read_only=True)
    try:
        ids = [r[0] for r in con.execute(
            "SELECT item_id FROM items WHERE run_id = ? ORDER BY position LIMIT 100 OFFSET ?",
            [RUN_ID, (page - 1) * 100]).fetchall()]  # fmt: skip
        con.execute(
            "SELECT item_id, attribute, value FROM judgments WHERE run_id = ? AND final "
            "AND item_id IN (SELECT unnest(?))",
            [RUN_ID, ids],
        ).fetchall()
    finally:
        con.close()


_AGGREGATES = (
    # What a run's first view aggregates: final score counts, samples, calls per item and per
    # agent, failures by reason, flags.
    "SELECT attribute, value, status, count(*) FROM judgments WHERE run_id = $r AND final "
    "GROUP BY ALL",
    "SELECT count(*) FILTER (WHERE status = 'ok'), count(*) FILTER (WHERE status = 'failed') "
    "FROM samples WHERE run_id = $r",
    "SELECT sum(n), sum(tin), sum(c), quantile_cont(t, 0.5), quantile_cont(t, 0.95) FROM "
    "(SELECT item_id, count(*) AS n, sum(prompt_tokens) AS tin, sum(cost_usd) AS c, "
    "sum(latency_s) AS t FROM calls WHERE run_id = $r GROUP BY item_id)",
    "SELECT role, agent, model, count(*), sum(cost_usd) FROM calls WHERE run_id = $r GROUP BY ALL",
    "SELECT error, count(*), list(DISTINCT item_id)[1:5] FROM samples WHERE run_id = $r "
    "AND status <> 'ok' GROUP BY error",
    "SELECT item_id, flags FROM items WHERE run_id = $r AND json_array_length(flags) > 0",
)


def _bare_run_first_view(db: Path) -> None:
    con = duckdb.connect(str(db), read_only=True)
    try:
        for sql in _AGGREGATES:
            con.execute(sql, {"r": RUN_ID}).fetchall()
    finally:
        con.close()
    _bare_run_page(db, 1)


_FINALS = "SELECT item_id, value AS k FROM judgments WHERE run_id = $r AND final AND attribute = "
_MEDIAN = (
    "SELECT j.item_id, j.value - h.m AS k FROM judgments j JOIN (SELECT item_id, "
    "median(score) AS m FROM human_ratings WHERE attribute = 'accurate' GROUP BY 1) h "
    "USING (item_id) WHERE j.run_id = $r AND j.final AND j.attribute = 'accurate'"
)
_LIST_CASES = [
    # (label, viewer URL, bare query: FROM/WHERE of the listed items with sort value k and
    #  the ORDER BY)
    (
        "list sorted by accurate, page {mid}",
        "/runs/{run}/?sort=score:accurate&desc=1&page={mid}",
        f"FROM items i LEFT JOIN ({_FINALS}'accurate') s USING (item_id) WHERE i.run_id = $r "
        "ORDER BY k DESC NULLS LAST, i.position",
    ),
    (
        "list by |judge - phys. median|",
        "/runs/{run}/?sort=absdiff:accurate&desc=1",
        f"FROM items i LEFT JOIN (SELECT item_id, abs(k) AS k FROM ({_MEDIAN})) s "
        "USING (item_id) WHERE i.run_id = $r ORDER BY k DESC NULLS LAST, i.position",
    ),
    (
        "list by cost, page {mid}",
        "/runs/{run}/?sort=cost&desc=1&page={mid}",
        "FROM items i LEFT JOIN (SELECT item_id, sum(cost_usd) AS k FROM calls WHERE run_id = $r "
        "GROUP BY 1) s USING (item_id) WHERE i.run_id = $r ORDER BY k DESC NULLS LAST, i.position",
    ),
    (
        "list filtered: failed, accurate>=3",
        "/runs/{run}/?failed=1&where=accurate%3E%3D3&sort=latency&desc=1",
        "FROM items i LEFT JOIN (SELECT item_id, sum(latency_s) AS k FROM calls WHERE run_id = $r "
        "GROUP BY 1) s USING (item_id) WHERE i.run_id = $r AND i.item_id IN (SELECT item_id "
        "FROM samples WHERE run_id = $r AND status <> 'ok') AND i.item_id IN (SELECT item_id "
        f"FROM ({_FINALS}'accurate') WHERE k >= 3) ORDER BY k DESC NULLS LAST, i.position",
    ),
    (
        "list searched, notes too",
        "/runs/{run}/?q=sample+2+of+item+4242&in_notes=1",
        "FROM items i WHERE i.run_id = $r AND (i.item_id ILIKE $q OR i.summary ILIKE $q "
        "OR CAST(i.notes AS VARCHAR) ILIKE $q OR i.item_id IN (SELECT item_id FROM samples "
        "WHERE run_id = $r AND rationale ILIKE $q) OR i.item_id IN (SELECT item_id FROM "
        "judgments WHERE run_id = $r AND rationale ILIKE $q)) ORDER BY i.position",
    ),
    (
        "list searched (ids, text, rationales)",
        "/runs/{run}/?q=sample+2+of+item+4242",
        "FROM items i WHERE i.run_id = $r AND (i.item_id ILIKE $q OR i.summary ILIKE $q "
        "OR i.reference ILIKE $q OR i.item_id IN (SELECT item_id FROM samples "
        "WHERE run_id = $r AND rationale ILIKE $q) OR i.item_id IN (SELECT item_id FROM "
        "judgments WHERE run_id = $r AND rationale ILIKE $q)) ORDER BY i.position",
    ),
]


def _bare_list(db: Path, sql: str, offset: int) -> None:
    """A listed page as plain SQL: the count, one window of 100 and their final scores."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        params = {"r": RUN_ID, "q": "%sample 2 of item 4242%"} if "$q" in sql else {"r": RUN_ID}
        con.execute(f"SELECT count(*) {sql.split(' ORDER BY ')[0]}", params).fetchall()
        ids = [r[0] for r in con.execute(
            f"SELECT i.item_id {sql} LIMIT 100 OFFSET {offset}", params
        ).fetchall()]  # fmt: skip
        con.execute(
            "SELECT item_id, attribute, value FROM judgments WHERE run_id = ? AND final "
            "AND item_id IN (SELECT unnest(?))",
            [RUN_ID, ids],
        ).fetchall()
    finally:
        con.close()


def _bare_item_page(db: Path, item_id: str) -> None:
    con = duckdb.connect(str(db), read_only=True)
    try:
        for table in ("items", "judgments", "samples", "calls", "messages"):
            con.execute(
                f"SELECT * FROM {table} WHERE run_id = ? AND item_id = ?", [RUN_ID, item_id]
            ).fetchall()
    finally:
        con.close()


def _per_page_export(db: Path, out: Path, items: list[str], run_pages: int) -> int:
    """The export as it was: each page rendered by the live viewer's page function (one read of
    the run, its rubric and its rows per page), written one by one. Returns pages written."""
    viewer = Viewer(db, n_boot=20)
    pages = 0

    def write(here: str, html: str) -> None:
        nonlocal pages
        (out / here).parent.mkdir(parents=True, exist_ok=True)
        (out / here).write_text(html, encoding="utf-8")
        pages += 1

    with viewer.session():
        write("index.html", viewer.runs(ExportLinks("index.html"), per_page=1, only=[RUN_ID]))
        for page in range(1, run_pages + 1):
            here = run_page_path(RUN_ID, page)
            write(here, viewer.run(ExportLinks(here), RUN_ID, page=page))
        for item in items:
            here = item_page_path(RUN_ID, item)
            write(here, viewer.item(ExportLinks(here), RUN_ID, item))
    return pages


def export_bench(db: Path, n_items: int, sample: int, work: Path) -> None:
    """Old per-page export (a sample of the pages) against `export_site` (all of them)."""
    step = max(n_items // max(sample, 1), 1)
    items = [f"item-{i:06d}" for i in range(0, n_items, step)][:sample]
    run_pages = min(5, (n_items + 99) // 100)
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        old_out, new_out = Path(tmp) / "old", Path(tmp) / "new"
        start = time.perf_counter()
        old_pages = _per_page_export(db, old_out, items, run_pages)
        old_s = time.perf_counter() - start
        old_rate = old_pages / old_s
        print(f"old (per page):  {old_pages:>7,} pages in {old_s:7.1f} s = {old_rate:7.1f} pages/s")
        start = time.perf_counter()
        summary = export_site(db, new_out, n_boot=20)
        new_s = time.perf_counter() - start
        new_rate = summary.pages / new_s
        print(f"new (bulk rows): {summary.pages:>7,} pages in {new_s:7.1f} s = "
              f"{new_rate:7.1f} pages/s")  # fmt: skip
        print(
            f"ratio: {new_rate / old_rate:.1f}x pages/s (target >= 10x); the old way would "
            f"take {summary.pages / old_rate / 60:.0f} min for the whole export"
        )
        compared = [p.relative_to(old_out) for p in old_out.rglob("*.html")]
        same = all((old_out / p).read_bytes() == (new_out / p).read_bytes() for p in compared)
        print(f"{len(compared):,} pages written both ways: {'identical' if same else 'DIFFER'}")
        if not same:
            sys.exit(1)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, help="items in the run (100,000; --export 50,000)")
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / "out")
    parser.add_argument("--export", action="store_true", help="time the static export")
    parser.add_argument(
        "--sample", type=int, default=2000, help="--export: item pages the old way renders"
    )
    args = parser.parse_args()
    args.items = args.items or (50_000 if args.export else 100_000)
    # "-rated": stores built before the ratings were added are not reused.
    db = args.work / f"viewer-{args.items}x{args.samples}-rated.duckdb"
    if not db.exists():
        args.work.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        build(db, args.items, args.samples)
        size = db.stat().st_size / 2**20
        print(f"built {db} ({size:.0f} MiB) in {time.perf_counter() - start:.1f} s")
    if args.export:
        export_bench(db, args.items, args.sample, args.work)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

        client = TestClient(create_app(db))

    def page(url: str):
        def get() -> None:
            response = client.get(url)
            assert response.status_code == 200, (url, response.status_code, response.text[-500:])

        return get

    def cold(url: str):
        # With the viewer's cache emptied the page computes the run's aggregates afresh.
        def get() -> None:
            client.app.state.viewer.cache.clear()
            response = client.get(url)
            assert response.status_code == 200, (url, response.status_code)

        return get

    last_page = (args.items + 99) // 100
    rng = random.Random(0)
    picks = [0, args.items // 2, args.items - 1, *rng.sample(range(args.items), 3)]
    cases = [
        ("run page, first view (cold)", cold(f"/runs/{RUN_ID}/"), lambda: _bare_run_first_view(db)),
        ("run page, items 1-100", page(f"/runs/{RUN_ID}/"), lambda: _bare_run_page(db, 1)),
        (
            f"run page, items page {last_page}",
            page(f"/runs/{RUN_ID}/?page={last_page}"),
            lambda: _bare_run_page(db, last_page),
        ),
    ]
    for n in picks:
        item = f"item-{n:06d}"
        cases.append((f"item page {item}", page(f"/runs/{RUN_ID}/items/{item}"),
                      lambda item=item: _bare_item_page(db, item)))  # fmt: skip
    # Sorted, searched and filtered item lists (issue 25): each against the bare DuckDB query
    # of the same page (the sort value of every listed item, one window of 100, the count).
    mid = last_page // 2
    for label, url, bare_sql in _LIST_CASES:
        full = url.format(run=RUN_ID, mid=mid)
        offset = (mid - 1) * 100 if "{mid}" in url else 0
        cases.append((label.format(mid=mid), page(full),
                      lambda sql=bare_sql, offset=offset: _bare_list(db, sql, offset)))  # fmt: skip
    middle = f"item-{args.items // 2:06d}"
    cases.append((
        "item page, in a sorted filtered list",
        page(f"/runs/{RUN_ID}/items/{middle}?sort=score:accurate&desc=1&where=citation%3E%3D2"),
        lambda: _bare_item_page(db, middle),
    ))  # fmt: skip
    print(f"{args.items:,} items x {args.samples} samples; median of {args.repeats} after warm-up")
    print(f"{'page':34} {'viewer ms':>10} {'bare ms':>9} {'ratio':>7}  target < 300 ms")
    worst = 0.0
    for label, viewer, bare in cases:
        ours, base = _paired_medians(viewer, bare, args.repeats)
        worst = max(worst, ours)
        verdict = "met" if ours < 300 else "MISSED"
        print(f"{label:34} {ours:10.1f} {base:9.1f} {ours / base:6.1f}x  {verdict}")
    print(f"slowest page: {worst:.1f} ms ({'met' if worst < 300 else 'missed'})")


if __name__ == "__main__":
    main()
