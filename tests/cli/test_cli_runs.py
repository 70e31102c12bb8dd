"""Run management: list (JSON, cost, failed, limit, filters, full width), delete, rename,
substring ids, $CLINJUDGE_DB, and one sample count everywhere."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest

from tests.cli._helpers import invoke, query, scalar
from tests.factories import make_items, write_jsonl

LONG_NAME = "cardiology-vendor-comparison-" + "x" * 90


def _run(data: Path, db: Path, *extra: str, env: dict[str, str] | None = None) -> str:
    args = ["run", "--data", str(data), "--model", "mock/judge", "--no-progress", *extra]
    if db is not None:
        args += ["--db", str(db)]
    result = invoke(*args, env=env)
    assert result.exit_code == 0, result.stderr
    return result.stdout.strip()


@pytest.fixture
def two_runs(items_file: Path, db_path: Path) -> tuple[str, str]:
    first = _run(items_file, db_path, "--name", LONG_NAME)
    second = _run(items_file, db_path, "--name", "panel-try", "--mode", "panel")
    return first, second


def test_list_json_has_cost_and_failed(two_runs: tuple[str, str], db_path: Path) -> None:
    result = invoke("runs", "list", "--db", str(db_path), "--json")
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [r["run_id"] for r in rows] == [two_runs[1], two_runs[0]]  # newest first
    for row in rows:
        assert row["failed_items"] == 0
        assert row["cost_usd"] == 0.0  # the mock provider is free, but priced


def test_list_limit_and_filters(two_runs: tuple[str, str], db_path: Path) -> None:
    def ids(*args: str) -> list[str]:
        result = invoke("runs", "list", "--db", str(db_path), "--json", *args)
        assert result.exit_code == 0, result.stderr
        return [r["run_id"] for r in json.loads(result.stdout)]

    assert ids("--limit", "1") == [two_runs[1]]
    assert ids("--mode", "panel") == [two_runs[1]]
    assert ids("--name", "CARDIOLOGY") == [two_runs[0]]
    assert ids("--status", "completed", "--rubric", "pdsqi9") == [two_runs[1], two_runs[0]]
    assert ids("--status", "failed") == []


def test_list_is_full_width_when_not_a_terminal(two_runs: tuple[str, str], db_path: Path) -> None:
    result = invoke("runs", "list", "--db", str(db_path), env={"COLUMNS": ""})
    assert result.exit_code == 0, result.stderr
    assert LONG_NAME in result.stdout
    assert "…" not in result.stdout
    assert "completed" in result.stdout and "$0.0000" in result.stdout


def _rows_of(db: Path, run_id: str) -> dict[str, int]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        tables = [
            t
            for (t,) in con.execute(
                "SELECT DISTINCT table_name FROM information_schema.columns "
                "WHERE column_name = 'run_id'"
            ).fetchall()
        ]
        return {
            t: con.execute(f'SELECT count(*) FROM "{t}" WHERE run_id = ?', [run_id]).fetchone()[0]
            for t in tables
        }
    finally:
        con.close()


def test_delete_removes_every_row_of_the_run(two_runs: tuple[str, str], db_path: Path) -> None:
    first, second = two_runs
    before = _rows_of(db_path, first)
    assert before["judgments"] and before["calls"] and before["messages"] and before["items"]
    kept = _rows_of(db_path, second)

    declined = invoke("runs", "delete", first[-6:], "--db", str(db_path), input="n\n")
    assert declined.exit_code == 1
    assert _rows_of(db_path, first) == before

    result = invoke("runs", "delete", first[-6:], "--db", str(db_path), "--yes")
    assert result.exit_code == 0, result.stderr
    assert set(_rows_of(db_path, first).values()) == {0}
    assert _rows_of(db_path, second) == kept


def test_delete_asks_and_accepts(two_runs: tuple[str, str], db_path: Path) -> None:
    result = invoke("runs", "delete", two_runs[0], "--db", str(db_path), input="y\n")
    assert result.exit_code == 0, result.stderr
    assert scalar(db_path, "SELECT count(*) FROM runs") == 1


def test_rename(two_runs: tuple[str, str], db_path: Path) -> None:
    result = invoke("runs", "rename", two_runs[1], "final panel", "--db", str(db_path))
    assert result.exit_code == 0, result.stderr
    names = query(db_path, "SELECT name FROM runs WHERE run_id = ?", [two_runs[1]])
    assert names == [("final panel",)]


def test_ids_match_any_unique_substring(two_runs: tuple[str, str], db_path: Path) -> None:
    first, _ = two_runs
    suffix = first.split("-")[-1]  # the random part, not a prefix
    result = invoke("runs", "show", suffix[1:5], "--db", str(db_path), "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["run_id"] == first
    ambiguous = invoke("runs", "show", "-", "--db", str(db_path))
    assert ambiguous.exit_code == 2
    assert "ambiguous" in ambiguous.stderr


def test_clinjudge_db_sets_the_default(
    items_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "central" / "all.duckdb"
    env = {"CLINJUDGE_DB": str(db)}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    run_id = _run(items_file, None, env=env)
    assert db.exists()
    assert not (elsewhere / "runs").exists()
    listed = invoke("runs", "list", "--json", env=env)
    assert [r["run_id"] for r in json.loads(listed.stdout)] == [run_id]
    shown = invoke("runs", "show", run_id, env=env)
    assert shown.exit_code == 0, shown.stderr
    resumed = invoke("run", "--resume", run_id, "--no-progress", env=env)
    assert resumed.exit_code == 0, resumed.stderr
    assert "already complete" in resumed.stderr


def test_one_sample_count_everywhere(tmp_path: Path, db_path: Path) -> None:
    data = write_jsonl(tmp_path / "five.jsonl", make_items(5))
    result = invoke(
        "run", "--data", str(data), "--model", "mock/judge", "--mode", "panel",
        "--samples", "2", "--db", str(db_path), "--no-progress",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    run_id = result.stdout.strip()
    # 5 items x 2 samples; the 3 panel members' own verdicts are not samples, their calls are.
    assert "10 samples ok, 0 failed of 10" in result.stderr
    assert re.search(r"\b30 model calls\b", result.stderr)
    shown = json.loads(invoke("runs", "show", run_id, "--db", str(db_path), "--json").stdout)
    assert (shown["samples_ok"], shown["samples_failed"], shown["calls"]) == (10, 0, 30)
    compared = json.loads(invoke("compare", run_id, "--db", str(db_path), "--json").stdout)
    row = compared["runs"][0]
    assert (row["samples_total"], row["failed_samples"]) == (10, 0)
    table = invoke("runs", "show", run_id, "--db", str(db_path)).stdout
    assert re.search(r"samples_ok\s*│\s*10\s", table)
    assert "{'judge'" not in table  # models are a table, not a Python dict
    assert re.search(r"judge\s*│\s*mock/judge", table)
