"""Cached prompt tokens in the store: recorded per call, priced, shown by `runs show`, the
viewer and `compare`, estimated by `--dry-run`; stores from schema version 4 still open."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pytest

from clinjudge.judges import ModelSettings
from clinjudge.judges.clients._settings import Price
from clinjudge.orchestration import RetryPolicy, RunConfig, create_run, execute_run, prepare_run
from clinjudge.runs import RunStore, prompt_cache_totals
from clinjudge.runs._store import SCHEMA_VERSION
from tests.cli._helpers import invoke
from tests.factories import make_items, write_jsonl
from tests.fake_openai import FakeOpenAIServer

PRICE = Price(input_per_mtok=1000.0, output_per_mtok=3000.0, cached_input_per_mtok=250.0)
FAST = RetryPolicy(max_attempts=2, initial_wait=0.01, max_wait=0.05, jitter=0.01)
MIN_PREFIX = 32


def _words(body: dict[str, Any]) -> list[str]:
    return [w for m in body["messages"] for w in str(m["content"]).split()]


def _expected_cached(requests: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """(prompt tokens, cached tokens) of each request: its longest prefix shared with an
    earlier one, in the fake server's word tokens, when at least MIN_PREFIX long."""
    seen: list[list[str]] = []
    out = []
    for body in requests:
        words = _words(body)
        shared = 0
        for earlier in seen:
            n = 0
            while n < min(len(words), len(earlier)) and words[n] == earlier[n]:
                n += 1
            shared = max(shared, n)
        seen.append(words)
        out.append((len(words), shared if shared >= MIN_PREFIX else 0))
    return out


@pytest.fixture(scope="module")
def cached_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[dict]]:
    tmp = tmp_path_factory.mktemp("cache")
    data = write_jsonl(tmp / "items.jsonl", make_items(3))
    db = tmp / "runs.duckdb"
    with FakeOpenAIServer(prompt_cache_min=MIN_PREFIX) as srv:
        judge = ModelSettings(
            model="openai/local-judge", base_url=srv.base_url, timeout=10, price=PRICE
        )
        # One request at a time: the server's "earlier requests" are the run's order.
        config = RunConfig(
            data=str(data), judge=judge, db=str(db), samples=3, concurrency=1, retry=FAST
        )
        prepared = prepare_run(config)
        with RunStore(db) as store:
            run_id = create_run(store, prepared)
            execute_run(store, run_id, prepared, show_progress=False)
        requests = list(srv.requests)
    return db, run_id, requests


def _calls(db: Path, run_id: str) -> list[dict[str, Any]]:
    with RunStore(db, read_only=True) as store:
        return store.query(
            "SELECT prompt_tokens, completion_tokens, cached_input_tokens, cache_write_tokens, "
            "cost_usd, cache_saving_usd FROM calls WHERE run_id = ?",
            [run_id],
        )


def test_cached_tokens_are_stored_per_call_and_priced(cached_run: tuple) -> None:
    db, run_id, requests = cached_run
    calls = _calls(db, run_id)
    assert len(calls) == len(requests) == 9
    expected = _expected_cached(requests)
    assert Counter((c["prompt_tokens"], c["cached_input_tokens"]) for c in calls) == Counter(
        expected
    )
    # Every sample after the first of an item repeats its whole prompt: 6 of 9 served whole.
    assert sum(1 for c in calls if c["cached_input_tokens"] == c["prompt_tokens"]) == 6
    for c in calls:
        uncached = c["prompt_tokens"] - c["cached_input_tokens"]
        dollars = (
            uncached * 1000.0 + c["cached_input_tokens"] * 250.0 + c["completion_tokens"] * 3000.0
        ) / 1e6
        assert c["cost_usd"] == pytest.approx(dollars)
        assert c["cache_saving_usd"] == pytest.approx(c["cached_input_tokens"] * 750.0 / 1e6)
        assert c["cache_write_tokens"] == 0


def test_runs_show_reports_cached_tokens_and_the_saving(cached_run: tuple) -> None:
    db, run_id, requests = cached_run
    cached = sum(c for _, c in _expected_cached(requests))
    prompt = sum(p for p, _ in _expected_cached(requests))
    shown = invoke("runs", "show", run_id, "--db", str(db), "--json")
    assert shown.exit_code == 0, shown.stderr
    summary = json.loads(shown.stdout)
    assert summary["cached_input_tokens"] == cached
    assert summary["cached_input_share"] == pytest.approx(cached / prompt, abs=1e-4)
    assert summary["cache_saving_usd"] == pytest.approx(cached * 750.0 / 1e6)
    assert summary["by_agent"][0]["cached_input_tokens"] == cached
    table = invoke("runs", "show", run_id, "--db", str(db))
    assert table.exit_code == 0
    row = re.search(r"cached_input_tokens\s*│?\s*(\d+)", table.stdout)
    assert row and int(row.group(1)) == cached, table.stdout


def test_compare_and_viewer_show_the_cached_share(cached_run: tuple) -> None:
    from clinjudge.analysis import compare_runs
    from clinjudge.reports._viewer_run import run_totals

    db, run_id, requests = cached_run
    expected = _expected_cached(requests)
    share = sum(c for _, c in expected) / sum(p for p, _ in expected)
    with RunStore(db, read_only=True) as store:
        row = compare_runs(store, [run_id]).rows[0]
        totals = run_totals(store, run_id, None)
    assert row.cached_input_share == pytest.approx(share)
    assert row.cache_saving_per_item_usd == pytest.approx(
        sum(c for _, c in expected) * 750.0 / 1e6 / 3
    )
    assert totals["prompt_cache"]["cached_input_tokens"] == sum(c for _, c in expected)
    shown = invoke("compare", run_id, "--db", str(db))
    assert shown.exit_code == 0, shown.stderr
    assert "cached in" in shown.stdout and f"{share:.0%}" in shown.stdout


def test_viewer_run_page_shows_the_cached_tokens_card(cached_run: tuple) -> None:
    import warnings

    from clinjudge.reports import create_app

    db, run_id, requests = cached_run
    cached = sum(c for _, c in _expected_cached(requests))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

        html = TestClient(create_app(db, n_boot=20)).get(f"/runs/{run_id}/").text
    card = html.split("cached input tokens</span>")[1].split("</div>")[0]
    assert f"{cached:,}" in card
    assert f"saved ${cached * 750.0 / 1e6:,.4f}" in card


# -- a store written at schema version 4 ----------------------------------------------------


def _version_4_store(path: Path) -> None:
    """A store as clinjudge wrote it at schema version 4: calls without the cache columns."""
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    con.execute("INSERT INTO meta VALUES ('schema_version', '4')")
    con.execute(
        "CREATE TABLE runs (run_id VARCHAR PRIMARY KEY, name VARCHAR, created_at TIMESTAMPTZ, "
        "status VARCHAR, mode VARCHAR, rubric VARCHAR, n_items INTEGER)"
    )
    con.execute("INSERT INTO runs VALUES ('old-run', 'x', now(), 'completed', 'single', 'p', 1)")
    con.execute(
        "CREATE TABLE calls (call_id VARCHAR PRIMARY KEY, run_id VARCHAR, item_id VARCHAR, "
        "sample INTEGER, seq INTEGER, role VARCHAR, agent VARCHAR, model VARCHAR, "
        "prompt_tokens INTEGER, completion_tokens INTEGER, tokens_estimated BOOLEAN, "
        "cost_usd DOUBLE, latency_s DOUBLE, status VARCHAR, error VARCHAR, "
        "finish_reason VARCHAR, started_at TIMESTAMPTZ, cached BOOLEAN, output_mode VARCHAR)"
    )
    con.execute(
        "INSERT INTO calls (call_id, run_id, item_id, sample, seq, role, agent, model, "
        "prompt_tokens, completion_tokens, cost_usd, status) VALUES "
        "('c1', 'old-run', 'i1', 1, 0, 'judge', 'judge', 'openai/x', 1500, 20, 0.01, 'ok')"
    )
    con.close()


def test_a_version_4_store_is_read_as_is_and_upgraded_on_write(tmp_path: Path) -> None:
    path = tmp_path / "v4.duckdb"
    _version_4_store(path)
    with RunStore(path, read_only=True) as store:  # read-only: nothing changes
        assert prompt_cache_totals(store, "old-run") is None
        assert not store.has_column("calls", "cached_input_tokens")
    with RunStore(path) as store:  # opened for writing: migrated
        columns = {r["column_name"]: r["column_type"] for r in store.query("DESCRIBE calls")}
        version = store.query("SELECT value FROM meta WHERE key = 'schema_version'")
        totals = prompt_cache_totals(store, "old-run")
        old = store.query("SELECT * FROM calls WHERE call_id = 'c1'")[0]
    assert version == [{"value": str(SCHEMA_VERSION)}] and SCHEMA_VERSION >= 5
    assert columns["cached_input_tokens"] == "INTEGER"
    assert columns["cache_write_tokens"] == "INTEGER"
    assert columns["cache_saving_usd"] == "DOUBLE"
    # The old call keeps its numbers; what it never recorded stays unknown, not zero.
    assert old["prompt_tokens"] == 1500 and old["cost_usd"] == 0.01
    assert old["cached_input_tokens"] is None
    assert totals is not None and totals["cached_input_tokens"] is None


# -- --dry-run --------------------------------------------------------------------------------


def _row(output: str, label: str) -> str:
    match = re.search(re.escape(label) + r"\s*│?\s*([^│\n]+)", output)
    assert match, output
    return match.group(1).strip()


def _number(text: str) -> int:
    return int(text.split()[0].replace(",", ""))


def test_dry_run_estimates_the_cached_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from clinjudge import estimate

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    data = write_jsonl(tmp_path / "one.jsonl", make_items(1))
    # One item, 4 samples: the same whole prompt 4 times; OpenAI serves a repeat from its
    # cache in whole 128-token steps beyond the first 1,024 tokens.
    est = estimate(str(data), model="openai/gpt-4o-mini", samples=4)
    per_prompt = est.prompt_tokens // 4
    assert per_prompt >= 1024
    served = 1024 + (per_prompt - 1024) // 128 * 128
    assert est.cached_input_tokens == 3 * served
    dollars = (
        (est.prompt_tokens - 3 * served) * 0.15
        + 3 * served * 0.075
        + est.max_completion_tokens * 0.60
    ) / 1e6
    assert est.cost_with_cache_usd == pytest.approx(dollars)
    assert est.cost_usd == pytest.approx(
        (est.prompt_tokens * 0.15 + est.max_completion_tokens * 0.60) / 1e6
    )

    db = tmp_path / "dry.duckdb"
    shown = invoke(
        "run", "--data", str(data), "--db", str(db), "--model", "openai/gpt-4o-mini",
        "--samples", "4", "--dry-run",
    )  # fmt: skip
    assert shown.exit_code == 0, shown.stderr
    assert _number(_row(shown.stderr, "cached prompt tokens (estimate)")) == 3 * served
    assert "an estimate" in shown.stderr
    assert not db.exists()


def test_dry_run_of_a_simulated_model_estimates_no_cache(tmp_path: Path) -> None:
    from clinjudge import estimate

    data = write_jsonl(tmp_path / "one.jsonl", make_items(2))
    assert estimate(str(data), model="mock/judge", samples=2).cached_input_tokens is None
