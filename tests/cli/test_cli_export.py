"""`judge export`: format from the file name, --format agreement, no silent overwrite,
discussions as transcripts."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.cli._helpers import invoke, query
from tests.factories import make_items, write_jsonl


@pytest.fixture
def run_id(items_file: Path, db_path: Path) -> str:
    result = invoke(
        "run", "--data", str(items_file), "--model", "mock/judge", "--db", str(db_path),
        "--no-progress",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return result.stdout.strip()


def _export(run: str, db: Path, out: Path, *extra: str):
    return invoke("export", run, "--out", str(out), "--db", str(db), *extra)


@pytest.mark.parametrize("name", ["x.csv", "x.CSV"])
def test_csv_name_writes_csv(run_id: str, db_path: Path, tmp_path: Path, name: str) -> None:
    out = tmp_path / name
    result = _export(run_id, db_path, out)
    assert result.exit_code == 0, result.stderr
    with out.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 6 * 11 + 6 * 11
    assert {"item_id", "attribute", "value"} <= set(rows[0])


def test_parquet_and_jsonl_names(run_id: str, db_path: Path, tmp_path: Path) -> None:
    assert _export(run_id, db_path, tmp_path / "x.parquet").exit_code == 0
    assert pq.read_table(tmp_path / "x.parquet").num_rows == 132
    assert _export(run_id, db_path, tmp_path / "x.jsonl").exit_code == 0
    lines = (tmp_path / "x.jsonl").read_text().splitlines()
    assert len(lines) == 132 and json.loads(lines[0])["run_id"] == run_id


def test_format_contradicting_the_name_is_refused(
    run_id: str, db_path: Path, tmp_path: Path
) -> None:
    out = tmp_path / "x.csv"
    result = _export(run_id, db_path, out, "--format", "jsonl")
    assert result.exit_code == 2
    assert ".csv" in result.stderr and "--format" in result.stderr
    assert not out.exists()


def test_unknown_ending_needs_format(run_id: str, db_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "x.txt"
    refused = _export(run_id, db_path, out)
    assert refused.exit_code == 2 and "--format" in refused.stderr
    assert not out.exists()
    assert _export(run_id, db_path, out, "--format", "csv").exit_code == 0
    assert out.read_text().startswith("run_id,")


def test_existing_file_needs_force(run_id: str, db_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "x.csv"
    out.write_text("keep me\n")
    refused = _export(run_id, db_path, out)
    assert refused.exit_code == 2 and "--force" in refused.stderr
    assert out.read_text() == "keep me\n"
    assert _export(run_id, db_path, out, "--force").exit_code == 0
    assert out.read_text().startswith("run_id,")


_LABEL = re.compile(r"^\[(?:attempt \d+, )?(round \d+|final|briefing|evidence|task)\] ")


def test_transcripts_of_a_discussion(tmp_path: Path, db_path: Path) -> None:
    data = write_jsonl(tmp_path / "two.jsonl", make_items(2))
    result = invoke(
        "run", "--data", str(data), "--model", "mock/judge", "--mode", "magentic",
        "--db", str(db_path), "--no-progress",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    run = result.stdout.strip()
    out = tmp_path / "talk.csv"
    exported = _export(run, db_path, out, "--table", "transcripts")
    assert exported.exit_code == 0, exported.stderr
    with out.open(newline="") as f:
        rows = list(csv.DictReader(f))
    stored = query(
        db_path,
        "SELECT item_id, sample, seq, agent, content FROM messages WHERE run_id = ? "
        "ORDER BY item_id, sample, seq",
        [run],
    )
    assert len(rows) == len(stored) > 0
    got = sorted((r["item_id"], int(r["sample"]), int(r["seq"])) for r in rows)
    assert got == [(i, s, q) for i, s, q, _, _ in stored]
    by_key = {(r["item_id"], int(r["sample"]), int(r["seq"])): r for r in rows}
    rounds = set()
    for item, sample, seq, agent, content in stored:
        row = by_key[(item, sample, seq)]
        assert row["agent"] == agent
        label = _LABEL.match(content)
        # The text is the message without its label; the round number comes from the label.
        assert row["text"] == (content[label.end() :] if label else content)
        expected = label.group(1) if label else ""
        assert row["phase"] == expected
        if expected.startswith("round "):
            assert row["round"] == expected.split()[1]
            rounds.add(int(row["round"]))
        else:
            assert row["round"] == ""
    assert rounds, "a magentic discussion has numbered rounds"
    assert any(r["phase"] == "final" for r in rows)


def _jsonl_rows(run: str, db: Path, tmp_path: Path) -> list[dict]:
    out = tmp_path / "reference.jsonl"
    assert _export(run, db, out).exit_code == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


@pytest.mark.parametrize("name", ["x.json", "x.JSON"])
def test_json_name_writes_one_array(run_id: str, db_path: Path, tmp_path: Path, name: str) -> None:
    out = tmp_path / name
    result = _export(run_id, db_path, out)
    assert result.exit_code == 0, result.stderr
    assert "(json)" in result.stderr
    rows = json.loads(out.read_text())  # one JSON document, not JSON Lines
    assert isinstance(rows, list) and len(rows) == 132
    assert rows == _jsonl_rows(run_id, db_path, tmp_path)


def test_format_json_and_jsonl_without_an_ending(
    run_id: str, db_path: Path, tmp_path: Path
) -> None:
    as_array = tmp_path / "scores.out"
    assert _export(run_id, db_path, as_array, "--format", "json").exit_code == 0
    rows = json.loads(as_array.read_text())
    lines = tmp_path / "scores.lines"
    assert _export(run_id, db_path, lines, "--format", "jsonl").exit_code == 0
    assert [json.loads(line) for line in lines.read_text().splitlines()] == rows
    for name in ("x.ndjson", "x.jsonl"):
        assert _export(run_id, db_path, tmp_path / name).exit_code == 0
        first = (tmp_path / name).read_text().splitlines()[0]
        assert json.loads(first)["run_id"] == run_id  # a line is a whole record


def test_json_of_other_tables_is_an_array(run_id: str, db_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    result = _export(run_id, db_path, out, "--table", "transcripts")
    assert result.exit_code == 0, result.stderr
    rows = json.loads(out.read_text())
    count = query(db_path, "SELECT count(*) FROM messages WHERE run_id = ?", [run_id])[0][0]
    assert len(rows) == count > 0
    assert {"item_id", "agent", "text"} <= set(rows[0])


def test_json_format_contradicting_the_name_is_refused(
    run_id: str, db_path: Path, tmp_path: Path
) -> None:
    for name, fmt in (("x.jsonl", "json"), ("x.json", "jsonl")):
        result = _export(run_id, db_path, tmp_path / name, "--format", fmt)
        assert result.exit_code == 2, result.stderr
        assert not (tmp_path / name).exists()
