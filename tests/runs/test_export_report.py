"""export_run (JSONL, CSV, Parquet) and run_summary on small runs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import duckdb
import pytest

from clinjudge.analysis import list_runs, run_summary
from clinjudge.judges import ModelSettings
from clinjudge.orchestration import RunConfig, create_run, execute_run, prepare_run
from clinjudge.runs import RunStore, StoreError, export_run, now

N_ITEMS, N_SAMPLES, N_KEYS = 6, 2, 11


@pytest.fixture
def mock_run(items_file: Path, db_path: Path) -> str:
    """A finished simulated run: 6 items x 2 samples with the mock provider."""
    config = RunConfig(
        data=str(items_file),
        judge=ModelSettings(model="mock/judge"),
        samples=N_SAMPLES,
        db=str(db_path),
    )
    prepared = prepare_run(config)
    with RunStore(db_path) as store:
        run_id = create_run(store, prepared)
        tally = execute_run(store, run_id, prepared, show_progress=False)
    assert (tally.ok, tally.failed) == (N_ITEMS * N_SAMPLES, 0)
    return run_id


def _read(path: Path, fmt: str) -> list[dict[str, Any]]:
    if fmt == "jsonl":
        return [json.loads(line) for line in path.read_text().splitlines()]
    reader = "read_csv" if fmt == "csv" else "read_parquet"
    cursor = duckdb.execute(f"SELECT * FROM {reader}('{path}')")
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_export_one_row_per_item_sample_agent_attribute(
    mock_run: str, db_path: Path, tmp_path: Path, fmt: str
) -> None:
    out = tmp_path / "out" / f"judgments.{fmt}"
    with RunStore(db_path, read_only=True) as store:
        count = export_run(store, mock_run[:12], out, fmt)
    rows = _read(out, fmt)
    expected = N_ITEMS * N_SAMPLES * N_KEYS + N_ITEMS * N_KEYS
    assert count == len(rows) == expected
    assert list(rows[0]) == [
        "run_id",
        "item_id",
        "sample",
        "agent",
        "attribute",
        "value",
        "final",
        "status",
        "error",
        "rationale",
        "simulated",
        "item_flags",
        "suspect_flags",
    ]
    assert all(r["item_flags"] in ("[]", []) for r in rows)  # synthetic items address no one
    keys = {(r["item_id"], r["sample"], r["agent"], r["attribute"]) for r in rows}
    assert len(keys) == len(rows)
    finals = [r for r in rows if r["final"] in (True, "true")]
    assert len(finals) == N_ITEMS * N_KEYS
    assert all(r["sample"] is None and r["agent"] == "final" for r in finals)
    samples = [r for r in rows if r["final"] in (False, "false")]
    assert {int(r["sample"]) for r in samples} == {1, 2}
    assert all(r["simulated"] in (True, "true") for r in rows)
    assert {r["run_id"] for r in rows} == {mock_run}
    # Rows come in input order.
    assert rows[0]["item_id"] == "item-0000"
    assert rows[-1]["item_id"] == f"item-{N_ITEMS - 1:04d}"
    assert sorted(os.listdir(out.parent)) == [out.name]


def test_export_of_real_run_is_not_simulated(db_path: Path, tmp_path: Path) -> None:
    with RunStore(db_path) as store:
        store.write_batch(
            {
                "runs": [{"run_id": "real", "created_at": now(), "simulated": False}],
                "judgments": [
                    {
                        "run_id": "real",
                        "item_id": "i",
                        "sample": 1,
                        "agent": "judge",
                        "attribute": "accurate",
                        "value": 4,
                        "final": False,
                        "status": "ok",
                    }
                ],
            }
        )
        export_run(store, "real", tmp_path / "x.jsonl", "jsonl")
    (row,) = _read(tmp_path / "x.jsonl", "jsonl")
    assert row["simulated"] is False
    assert row["sample"] == 1


def test_export_file_appears_only_complete(
    mock_run: str, db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "judgments.parquet"
    seen: dict[str, Any] = {}
    real_replace = os.replace

    def checking_replace(src: str | Path, dst: str | Path) -> None:
        seen["target_existed"] = Path(dst).exists()
        seen["rows_in_partial"] = len(_read(Path(src), "parquet"))
        real_replace(src, dst)

    monkeypatch.setattr("clinjudge.runs._export.os.replace", checking_replace)
    with RunStore(db_path, read_only=True) as store:
        count = export_run(store, mock_run, out, "parquet")
    assert seen == {"target_existed": False, "rows_in_partial": count}
    assert os.listdir(tmp_path).count(out.name) == 1
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".partial")]


def test_failed_export_leaves_no_file(
    mock_run: str, db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "exports" / "judgments.csv"

    def failing_replace(src: str | Path, dst: str | Path) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("clinjudge.runs._export.os.replace", failing_replace)
    with RunStore(db_path, read_only=True) as store, pytest.raises(OSError, match="disk full"):
        export_run(store, mock_run, out, "csv")
    assert os.listdir(out.parent) == []


def test_export_errors(mock_run: str, db_path: Path, tmp_path: Path) -> None:
    with RunStore(db_path, read_only=True) as store:
        with pytest.raises(ValueError, match="unknown export format 'xlsx'"):
            export_run(store, mock_run, tmp_path / "x.xlsx", "xlsx")
        with pytest.raises(StoreError, match="no run"):
            export_run(store, "nope", tmp_path / "x.csv", "csv")
    assert not (tmp_path / "x.csv").exists()


# -- run_summary -------------------------------------------------------------------------------


def _call(
    item: str,
    sample: int,
    seq: int,
    *,
    status: str = "ok",
    latency: float,
    tokens: tuple[int, int] = (0, 0),
    cost: float | None = None,
) -> dict[str, Any]:
    return {
        "call_id": f"s/{item}/{sample}/judge/{seq}",
        "run_id": "s",
        "item_id": item,
        "sample": sample,
        "seq": seq,
        "role": "judge",
        "agent": "judge",
        "model": "m/x",
        "prompt_tokens": tokens[0] if status == "ok" else None,
        "completion_tokens": tokens[1] if status == "ok" else None,
        "tokens_estimated": False,
        "cost_usd": cost,
        "latency_s": latency,
        "status": status,
        "error": None if status == "ok" else "rate_limit: 429",
    }


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def test_run_summary_counts_tokens_cost_and_latency(db_path: Path) -> None:
    calls = [
        _call("a", 1, 0, latency=1.0, tokens=(100, 10), cost=0.01),
        _call("a", 2, 0, status="error", latency=0.5),
        _call("a", 2, 1, latency=2.0, tokens=(120, 12), cost=0.02),
        _call("b", 1, 0, latency=3.0, tokens=(80, 8), cost=0.03),
        _call("b", 2, 0, latency=4.0, tokens=(90, 9), cost=0.04),
    ]
    samples = [
        {"run_id": "s", "item_id": "a", "sample": 1, "agent": "judge", "status": "ok"},
        {"run_id": "s", "item_id": "a", "sample": 2, "agent": "judge", "status": "ok"},
        {
            "run_id": "s",
            "item_id": "b",
            "sample": 1,
            "agent": "judge",
            "status": "failed",
            "error": "parse: no JSON",
        },
        {
            "run_id": "s",
            "item_id": "b",
            "sample": 2,
            "agent": "judge",
            "status": "failed",
            "error": "parse: no JSON",
        },
    ]
    finals = [
        {
            "run_id": "s",
            "item_id": item,
            "sample": 0,
            "agent": "final",
            "attribute": "accurate",
            "final": True,
            "status": status,
        }
        for item, status in (("a", "ok"), ("b", "failed"))
    ]
    with RunStore(db_path) as store:
        store.write_batch(
            {
                "runs": [
                    {
                        "run_id": "s",
                        "name": "small",
                        "created_at": now(),
                        "status": "completed",
                        "mode": "single",
                        "rubric": "pdsqi9",
                        "rubric_version": "1",
                        "models": '{"judge": "m/x"}',
                        "simulated": False,
                        "n_items": 2,
                        "n_samples": 2,
                    }
                ],
                "calls": calls,
                "samples": samples,
                "judgments": finals,
            }
        )
        summary = run_summary(store, "s").to_dict()
        listed = list_runs(store)
    latencies = [c["latency_s"] for c in calls]
    per_item = [1.0 + 0.5 + 2.0, 3.0 + 4.0]
    assert summary["run_id"] == "s"
    assert summary["status"] == "completed"
    assert summary["simulated"] is False
    assert (summary["items_ok"], summary["items_failed"]) == (1, 1)
    assert (summary["samples_ok"], summary["samples_failed"]) == (2, 2)
    assert (summary["calls"], summary["calls_failed"]) == (5, 1)
    assert (summary["tokens_in"], summary["tokens_out"]) == (390, 39)
    assert summary["cost_usd"] == pytest.approx(0.10)
    assert summary["calls_unpriced"] == 0
    assert summary["call_latency_p50_s"] == pytest.approx(_quantile(latencies, 0.5))
    assert summary["call_latency_p95_s"] == pytest.approx(_quantile(latencies, 0.95))
    assert summary["item_latency_p50_s"] == pytest.approx(_quantile(per_item, 0.5))
    assert summary["item_latency_p95_s"] == pytest.approx(_quantile(per_item, 0.95))
    assert summary["top_errors"] == [{"error": "parse: no JSON", "n": 2}]
    assert summary["models"] == {"judge": "m/x"}
    json.dumps(summary, default=str)  # printable by `judge runs show --json`
    assert [(r["run_id"], r["model"]) for r in listed] == [("s", "m/x")]


def test_run_summary_of_mock_run(mock_run: str, db_path: Path) -> None:
    with RunStore(db_path, read_only=True) as store:
        summary = run_summary(store, mock_run).to_dict()
    assert summary["simulated"] is True
    assert summary["status"] == "completed"
    assert summary["items"] == summary["items_ok"] == N_ITEMS
    assert summary["items_failed"] == 0
    assert summary["samples_ok"] == N_ITEMS * N_SAMPLES
    assert summary["calls"] == N_ITEMS * N_SAMPLES
    assert summary["tokens_in"] > 0 and summary["tokens_out"] > 0
    assert summary["call_latency_p50_s"] is not None
    assert summary["call_latency_p95_s"] >= summary["call_latency_p50_s"]


def test_json_export_is_whole_or_absent(
    mock_run: str, db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "judgments.json"
    out.write_text("previous\n")
    seen: dict[str, Any] = {}
    real_replace = os.replace

    def checking_replace(src: str | Path, dst: str | Path) -> None:
        seen["partial"] = json.loads(Path(src).read_text())  # complete before it is moved
        seen["target"] = Path(dst).read_text()
        real_replace(src, dst)

    monkeypatch.setattr("clinjudge.runs._export.os.replace", checking_replace)
    with RunStore(db_path, read_only=True) as store:
        count = export_run(store, mock_run, out, "json")
    assert seen["target"] == "previous\n" and len(seen["partial"]) == count
    assert json.loads(out.read_text()) == seen["partial"]

    def failing_replace(src: str | Path, dst: str | Path) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("clinjudge.runs._export.os.replace", failing_replace)
    again = tmp_path / "again.json"
    with RunStore(db_path, read_only=True) as store, pytest.raises(OSError, match="disk full"):
        export_run(store, mock_run, again, "json")
    assert not again.exists()
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".partial")]
