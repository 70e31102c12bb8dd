"""`judge run` with the mock provider, `judge runs`, `judge export` and `judge rubric`."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
import yaml

import clinjudge.rubrics
from tests.cli._helpers import invoke, query, scalar

PDSQI9_FILE = Path(clinjudge.rubrics.__file__).parent / "data" / "pdsqi9.yaml"
RUN_ID = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{6}$")


@pytest.fixture
def mock_run(items_file: Path, db_path: Path) -> str:
    result = invoke(
        "run",
        "--data",
        str(items_file),
        "--model",
        "mock/judge",
        "--db",
        str(db_path),
        "--samples",
        "2",
        "--no-progress",
    )
    assert result.exit_code == 0, result.stderr
    return result.stdout.strip()


def test_run_prints_run_id_and_says_simulated(mock_run: str, db_path: Path) -> None:
    assert RUN_ID.match(mock_run), mock_run
    assert query(db_path, "SELECT status, simulated, n_items, n_samples FROM runs") == [
        ("completed", True, 6, 2)
    ]
    assert scalar(db_path, "SELECT count(*) FROM samples WHERE status = 'ok'") == 12
    assert scalar(db_path, "SELECT count(*) FROM judgments WHERE NOT final") == 12 * 11
    assert scalar(db_path, "SELECT count(*) FROM judgments WHERE final") == 6 * 11


def test_run_stderr_says_simulated(items_file: Path, db_path: Path) -> None:
    result = invoke(
        "run",
        "--data",
        str(items_file),
        "--model",
        "mock/judge",
        "--db",
        str(db_path),
        "--no-progress",
    )
    assert result.exit_code == 0
    assert result.stdout.count("\n") == 1  # only the run id goes to stdout
    assert "SIMULATED" in result.stderr
    assert "6 samples ok, 0 failed" in result.stderr


def test_runs_list(mock_run: str, db_path: Path) -> None:
    result = invoke("runs", "list", "--db", str(db_path))
    assert result.exit_code == 0, result.stderr
    assert mock_run in result.stdout
    assert "mock/judge (SIMULATED)" in result.stdout
    assert "completed" in result.stdout


def test_runs_show_json(mock_run: str, db_path: Path) -> None:
    result = invoke("runs", "show", mock_run[:15], "--db", str(db_path), "--json")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["run_id"] == mock_run
    assert (summary["items_ok"], summary["items_failed"]) == (6, 0)
    assert (summary["samples_ok"], summary["samples_failed"]) == (12, 0)
    assert summary["calls"] == 12
    assert summary["tokens_in"] > 0
    assert summary["simulated"] is True
    assert "SIMULATED" in summary["notice"]
    assert summary["status"] == "completed"


def test_runs_show_table(mock_run: str, db_path: Path) -> None:
    result = invoke("runs", "show", mock_run, "--db", str(db_path))
    assert result.exit_code == 0, result.stderr
    assert "items_ok" in result.stdout
    assert "call_latency_p95_s" in result.stdout


def test_runs_show_unknown_run(mock_run: str, db_path: Path) -> None:
    result = invoke("runs", "show", "nope", "--db", str(db_path))
    assert result.exit_code == 2
    assert "no run 'nope'" in result.stderr


def test_runs_list_missing_db_is_not_created(tmp_path: Path) -> None:
    db = tmp_path / "missing" / "x.duckdb"
    result = invoke("runs", "list", "--db", str(db))
    assert result.exit_code == 2
    assert "no such database" in result.stderr
    assert not db.parent.exists()


def test_export_csv(mock_run: str, db_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "exported" / "run.csv"
    result = invoke("export", mock_run, "--format", "csv", "--out", str(out), "--db", str(db_path))
    assert result.exit_code == 0, result.stderr
    assert f"wrote {12 * 11 + 6 * 11} rows" in result.stderr
    assert "SIMULATED" in result.stderr
    with out.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 12 * 11 + 6 * 11
    assert {r["simulated"] for r in rows} == {"true"}
    assert {r["sample"] for r in rows if r["final"] == "true"} == {""}


def test_export_bad_format_and_unknown_run(mock_run: str, db_path: Path, tmp_path: Path) -> None:
    bad = invoke(
        "export", mock_run, "--format", "xlsx", "--out", str(tmp_path / "x"), "--db", str(db_path)
    )
    assert bad.exit_code == 2
    assert "unknown format 'xlsx'" in bad.stderr
    unknown = invoke("export", "nope", "--out", str(tmp_path / "x.jsonl"), "--db", str(db_path))
    assert unknown.exit_code == 2
    assert "no run 'nope'" in unknown.stderr
    assert not (tmp_path / "x.jsonl").exists()


# -- rubric ------------------------------------------------------------------------------------


def test_rubric_list() -> None:
    result = invoke("rubric", "list")
    assert result.exit_code == 0
    assert "pdsqi9" in result.stdout
    assert "11" in result.stdout


def test_rubric_show() -> None:
    result = invoke("rubric", "show", "pdsqi9")
    assert result.exit_code == 0
    for key in ("citation", "accurate", "synthesized", "voice_note"):
        assert key in result.stdout
    assert "null when abstraction=0" in result.stdout


def test_rubric_show_prompt() -> None:
    result = invoke("rubric", "show", "pdsqi9", "--prompt")
    assert result.exit_code == 0
    assert '"citation"' in result.stdout
    assert "RUBRIC" in result.stdout


def test_rubric_show_unknown() -> None:
    result = invoke("rubric", "show", "nope")
    assert result.exit_code == 2
    assert "unknown rubric 'nope'" in result.stderr


def test_rubric_validate_good_file(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(PDSQI9_FILE.read_text())
    result = invoke("rubric", "validate", str(path))
    assert result.exit_code == 0, result.stderr
    assert "valid rubric pdsqi9" in result.stdout
    assert "11 attributes" in result.stdout


def test_rubric_validate_broken_file_names_the_field(tmp_path: Path) -> None:
    data = yaml.safe_load(PDSQI9_FILE.read_text())
    data["attributes"][2]["scale"] = "stars"
    del data["version"]
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(data))
    result = invoke("rubric", "validate", str(path))
    assert result.exit_code == 2
    assert "field attributes.2.scale" in result.stderr
    assert "field version" in result.stderr
    assert str(path.name) in result.stderr


def test_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.stdout.startswith("clinjudge ")
