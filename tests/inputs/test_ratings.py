"""load_ratings without a rubric (`judge agree --ratings`): JSONL, CSV and Parquet, the item_id
vocabulary with unit_id as its alias, and errors that name file, line or row, and field. Read
against a rubric (`judge ratings import`, `judge audit --ratings`): tests/runs/test_ratings.py."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from clinjudge.inputs import HumanRating, InputError, load_ratings
from clinjudge.inputs._ratings import is_null_score
from clinjudge.rubrics import Rubric

ROWS = [
    {"item_id": "s1", "rater_id": "h1", "score": 4, "attribute": "accurate"},
    {"item_id": "s1", "rater_id": "h2", "score": None, "attribute": "accurate"},
    {"item_id": "s2", "rater_id": "h1", "score": 2.5, "attribute": "accurate"},
]


def _jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows) + "\n")
    return path


def _expected() -> list[tuple[str, str, str | None, float | None]]:
    return [(r["item_id"], r["rater_id"], r["attribute"], r["score"]) for r in ROWS]


def _plain(ratings: list[HumanRating]) -> list[tuple[str, str, str | None, float | None]]:
    return [(r.item_id, r.rater_id, r.attribute, r.score) for r in ratings]


def test_load_jsonl(tmp_path: Path) -> None:
    ratings = load_ratings(_jsonl(tmp_path / "r.jsonl", ROWS))
    assert _plain(ratings) == _expected()
    assert ratings[0].where == f"{tmp_path / 'r.jsonl'}:line 1"


def test_load_csv(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["item_id", "rater_id", "score", "attribute"])
        writer.writeheader()
        writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in ROWS)
    assert _plain(load_ratings(path)) == _expected()


def test_load_parquet(tmp_path: Path) -> None:
    path = tmp_path / "r.parquet"
    table = pa.table(
        {"item_id": [1, 1, 2], "rater_id": ["h1", "h2", "h1"], "score": [4.0, None, 2.5]}
    )
    pq.write_table(table, path)
    ratings = load_ratings(path)
    assert [r.item_id for r in ratings] == ["1", "1", "2"]
    assert [r.score for r in ratings] == [4.0, None, 2.5]
    assert all(r.attribute is None for r in ratings)


def test_unit_id_is_read_as_item_id(tmp_path: Path, pdsqi9: Rubric) -> None:
    # Files written for `judge agree --ratings` before the vocabulary was one keep working.
    old = [{("unit_id" if k == "item_id" else k): v for k, v in row.items()} for row in ROWS]
    assert _plain(load_ratings(_jsonl(tmp_path / "old.jsonl", old))) == _expected()
    rated = [{"unit_id": "i1", "rater_id": "r1", "attribute": "accurate", "score": 4}]
    (rating,) = load_ratings(_jsonl(tmp_path / "import.jsonl", rated), pdsqi9)
    assert (rating.item_id, rating.attribute, rating.score) == ("i1", "accurate", 4.0)
    empty = _jsonl(tmp_path / "empty.jsonl", [{"unit_id": " ", "rater_id": "r", "score": 3}])
    with pytest.raises(InputError, match=r"line 1: field unit_id: must not be empty"):
        load_ratings(empty)


def test_vendor_names_an_audit_item(tmp_path: Path) -> None:
    rows = [{"vendor": "acme", "item_id": "e1", "rater_id": "r", "score": 3}]
    (rating,) = load_ratings(_jsonl(tmp_path / "v.jsonl", rows))
    assert rating.item_id == "acme::e1"


def test_repeated_records_are_samples_without_a_rubric(tmp_path: Path, pdsqi9: Rubric) -> None:
    rows = [ROWS[0], {**ROWS[0], "score": 5}]
    assert [r.score for r in load_ratings(_jsonl(tmp_path / "j.jsonl", rows))] == [4.0, 5.0]
    with pytest.raises(InputError, match="duplicate rating of 'accurate'"):
        load_ratings(_jsonl(tmp_path / "j.jsonl", rows), pdsqi9)


def test_load_errors_name_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(
        "\n".join(
            [
                json.dumps({"item_id": "s1", "rater_id": "h1", "score": 3}),
                json.dumps({"item_id": "s1", "rater_id": "h2", "score": "high"}),
                json.dumps({"item_id": "", "rater_id": "h3", "score": 3}),
                json.dumps({"item_id": "s2", "rater_id": "h3"}),
                "[1, 2]",
                json.dumps({"item_id": "s3", "rater_id": "h3", "score": "inf"}),
                json.dumps({"item_id": "s3", "rater_id": True, "score": 1, "attribute": [1]}),
                "{not json",
            ]
        )
        + "\n"
    )
    expected = [
        f"{path}:line 2: field score: must be a number, got 'high'",
        f"{path}:line 3: field item_id: must not be empty",
        f"{path}:line 4: field score: missing (write null where there is no score)",
        f"{path}:line 5: a rating must be a JSON object",
        f"{path}:line 6: field score: must be a finite number, got 'inf'",
        f"{path}:line 7: field rater_id: must be a string, got True",
        f"{path}:line 7: field attribute: must be a string, got [1]",
    ]
    # The line that is not JSON is reported with the others, not instead of them.
    with pytest.raises(InputError) as info:
        load_ratings(path)
    assert info.value.problems == [
        *expected,
        f"{path}:line 8: not valid JSON (Expecting property name enclosed in double quotes "
        "at column 2)",
    ]

    path.write_text("\n".join(path.read_text().splitlines()[:7]) + "\n")
    with pytest.raises(InputError) as info:
        load_ratings(path)
    assert info.value.problems == expected


def test_syntax_error_first_does_not_hide_rubric_problems(tmp_path: Path, pdsqi9: Rubric) -> None:
    rows = [
        '{"item_id": "s1", "rater_id": "h1", "attribute": "accurate", "score": 4',  # unclosed
        json.dumps({"item_id": "s1", "rater_id": "h1", "attribute": "accurate", "score": 9}),
        json.dumps({"item_id": "s1", "rater_id": "h1", "attribute": "colour", "score": 1}),
    ]
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(InputError) as info:
        load_ratings(path, pdsqi9)
    problems = info.value.problems
    assert [p.split(": ")[0] for p in problems] == [f"{path}:line {n}" for n in (1, 2, 3)]
    assert "not valid JSON" in problems[0]
    assert "field score: accurate must be a whole number from 1 to 5, got 9" in problems[1]
    assert "field attribute: 'colour' is not a key of rubric pdsqi9" in problems[2]


def test_load_csv_errors_name_row(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("item_id,rater_id,score\ns1,h1,3\ns2,,x\n")
    with pytest.raises(InputError) as info:
        load_ratings(path)
    assert info.value.problems == [
        f"{path}:row 2: field rater_id: missing",
        f"{path}:row 2: field score: must be a number, got 'x'",
    ]
    with pytest.raises(InputError, match="no such file"):
        load_ratings(tmp_path / "absent.jsonl")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(InputError, match="no ratings"):
        load_ratings(empty)


@pytest.mark.parametrize("spelling", ["N/A", "n/a", " NA ", "none", "null", "", None])
def test_null_spellings_read_alike_with_and_without_a_rubric(
    tmp_path: Path, pdsqi9: Rubric, spelling: Any
) -> None:
    # `judge agree --ratings` once rejected "N/A" that `judge ratings import` stores as null.
    rows = [
        {"item_id": "u1", "rater_id": "a", "attribute": "abstraction", "score": 0},
        {"item_id": "u1", "rater_id": "a", "attribute": "synthesized", "score": spelling},
    ]
    path = _jsonl(tmp_path / "ratings.jsonl", rows)
    assert [r.score for r in load_ratings(path)] == [0.0, None]
    assert [r.score for r in load_ratings(path, pdsqi9)] == [0.0, None]
    assert is_null_score(spelling) and not is_null_score("3") and not is_null_score(0)
