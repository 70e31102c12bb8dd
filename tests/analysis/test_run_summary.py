"""`judge runs show` breaks calls, tokens, cost and latency down by role and agent."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from clinjudge.analysis import run_summary as _run_summary
from clinjudge.judges import ModelSettings
from clinjudge.orchestration import RetryPolicy, RunConfig, create_run, execute_run, prepare_run
from clinjudge.runs import RunStore
from tests.cli._helpers import invoke
from tests.factories import make_items, persona_of, responder, write_jsonl
from tests.fake_openai import FakeOpenAIServer, Fault

FAST = RetryPolicy(max_attempts=4, initial_wait=0.01, max_wait=0.05, jitter=0.01)
BY_AGENT_KEYS = [
    "role",
    "agent",
    "model",
    "calls",
    "tokens_in",
    "tokens_out",
    "cost_usd",
    "latency_s_sum",
    "cached_input_tokens",  # the provider's prompt cache (#22)
]


def run_summary(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """``run_summary`` as ``--json`` prints it: the layout these tests pin down (the typed result
    is read by attribute in tests/analysis/test_typed_results.py)."""
    return _run_summary(*args, **kwargs).to_dict()


def _run(tmp_path: Path, config_kw: dict[str, Any], server: FakeOpenAIServer | None) -> Path:
    data = write_jsonl(tmp_path / "items.jsonl", make_items(4))
    db = tmp_path / "runs.duckdb"
    if server is None:
        judge = ModelSettings(model="mock/judge")
    else:
        judge = ModelSettings(model="openai/local-judge", base_url=server.base_url, timeout=5.0)
    config = RunConfig(data=str(data), judge=judge, db=str(db), retry=FAST, **config_kw)
    prepared = prepare_run(config)
    with RunStore(db) as store:
        run_id = create_run(store, prepared)
        execute_run(store, run_id, prepared, show_progress=False)
    (tmp_path / "run_id").write_text(run_id)
    return db


@pytest.fixture
def panel_db(tmp_path: Path) -> Path:
    """A panel run where every other call of the low scorer per item hits a 429 (retried)."""
    seen: Counter[str] = Counter()

    def faults(_index: int, body: dict[str, Any]) -> Fault | None:
        persona = persona_of(body)
        if persona != "low_scorer":
            return None
        item = body["messages"][1]["content"]
        seen[item] += 1
        # Requests alternate 429, ok, 429, ok: two samples take exactly four calls.
        return Fault("rate_limit", retry_after=0.01) if seen[item] % 2 == 1 else None

    other = {"model": "openai/other-judge", "timeout": 5.0}
    with FakeOpenAIServer(responder, faults=faults) as server:
        other["base_url"] = server.base_url
        return _run(
            tmp_path,
            {
                "mode": "panel",
                "personas": "scoring",
                "samples": 2,
                "roles": {"middle_scorer": ModelSettings(**other)},
            },
            server,
        )


def test_runs_show_json_by_agent_sums_to_totals(panel_db: Path, tmp_path: Path) -> None:
    run_id = (tmp_path / "run_id").read_text()
    result = invoke("runs", "show", run_id, "--db", str(panel_db), "--json")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    rows = summary["by_agent"]
    assert all(list(r) == BY_AGENT_KEYS for r in rows)
    assert [(r["role"], r["agent"], r["model"]) for r in rows] == [
        ("panel_member", "high_scorer", "openai/local-judge"),
        ("panel_member", "low_scorer", "openai/local-judge"),
        ("panel_member", "middle_scorer", "openai/other-judge"),
    ]
    # 4 items x 2 samples per member; the low scorer also has one 429 attempt per sample.
    assert [r["calls"] for r in rows] == [8, 16, 8]
    assert sum(r["calls"] for r in rows) == summary["calls"] == 32
    assert summary["calls_failed"] == 8
    assert sum(r["tokens_in"] for r in rows) == summary["tokens_in"] > 0
    assert sum(r["tokens_out"] for r in rows) == summary["tokens_out"] > 0
    assert all(r["cost_usd"] is None for r in rows)  # local models have no price
    with RunStore(panel_db, read_only=True) as store:
        total_latency = store.query(
            "SELECT sum(latency_s) AS t FROM calls WHERE run_id = ?", [run_id]
        )[0]["t"]
    assert sum(r["latency_s_sum"] for r in rows) == pytest.approx(total_latency)
    assert all(r["latency_s_sum"] > 0 for r in rows)


def test_runs_show_table_by_agent(panel_db: Path, tmp_path: Path) -> None:
    run_id = (tmp_path / "run_id").read_text()
    result = invoke("runs", "show", run_id, "--db", str(panel_db))
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "by role and agent" in out
    for text in ("latency s", "high_scorer", "middle_scorer", "openai/other-judge"):
        assert text in out
    low = next(line for line in out.splitlines() if "low_scorer" in line)
    assert "16" in low.split()


def test_single_run_has_one_judge_row(tmp_path: Path) -> None:
    db = _run(tmp_path, {"samples": 2}, None)
    with RunStore(db, read_only=True) as store:
        summary = run_summary(store, (tmp_path / "run_id").read_text())
    assert len(summary["by_agent"]) == 1
    row = summary["by_agent"][0]
    assert (row["role"], row["agent"], row["model"]) == ("judge", "judge", "mock/judge")
    assert row["calls"] == summary["calls"] == 8
    assert row["tokens_in"] == summary["tokens_in"]
    assert row["tokens_out"] == summary["tokens_out"]
    assert row["cost_usd"] == summary["cost_usd"]
