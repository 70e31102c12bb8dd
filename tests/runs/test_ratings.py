"""Human ratings: validation against the rubric (clinjudge.inputs.load_ratings), errors with
file:line and field, upserts into the store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from clinjudge.inputs import InputError
from clinjudge.inputs import load_ratings as load_human_ratings
from clinjudge.rubrics import Rubric
from clinjudge.runs import RunStore, import_ratings, ratings_overview


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _rating(item: str, rater: str, attribute: str, score: Any) -> dict[str, Any]:
    return {"item_id": item, "rater_id": rater, "attribute": attribute, "score": score}


def _full_set(item: str, rater: str, base: int = 4) -> list[dict[str, Any]]:
    likert = ["citation", "accurate", "thorough", "useful", "organized", "comprehensible"]
    rows = [_rating(item, rater, key, base) for key in likert]
    rows += [
        _rating(item, rater, "succinct", 3),
        _rating(item, rater, "abstraction", 1),
        _rating(item, rater, "synthesized", 4),
        _rating(item, rater, "voice_summ", 0),
        _rating(item, rater, "voice_note", 1),
    ]
    return rows


def _count(db: Path) -> int:
    con = duckdb.connect(str(db), read_only=True)
    try:
        row = con.execute("SELECT count(*) FROM human_ratings").fetchone()
        return int(row[0]) if row else 0
    finally:
        con.close()


def test_valid_jsonl_is_imported(tmp_path: Path, db_path: Path, pdsqi9: Rubric) -> None:
    rows = _full_set("item-0000", "dr_a") + _full_set("item-0001", "dr_b", base=2)
    path = _jsonl(tmp_path / "ratings.jsonl", rows)
    with RunStore(db_path) as store:
        summary = import_ratings(store, path, pdsqi9)
        stored = store.query(
            "SELECT item_id, rater_id, attribute, score, rubric, source FROM human_ratings "
            "WHERE attribute = 'accurate' ORDER BY item_id"
        )
        overview = ratings_overview(store)
    assert (summary.rows, summary.new, summary.changed, summary.unchanged) == (22, 22, 0, 0)
    assert (summary.items, summary.raters) == (2, 2)
    assert [(r["item_id"], r["rater_id"], r["score"]) for r in stored] == [
        ("item-0000", "dr_a", 4.0),
        ("item-0001", "dr_b", 2.0),
    ]
    assert {r["rubric"] for r in stored} == {"pdsqi9"}
    assert stored[0]["source"] == str(path)
    assert [(o["rater_id"], o["items"], o["ratings"]) for o in overview] == [
        ("dr_a", 1, 11),
        ("dr_b", 1, 11),
    ]


def test_reimport_is_idempotent_and_upserts(tmp_path: Path, db_path: Path, pdsqi9: Rubric) -> None:
    rows = _full_set("item-0000", "dr_a")
    path = _jsonl(tmp_path / "ratings.jsonl", rows)
    with RunStore(db_path) as store:
        import_ratings(store, path, pdsqi9)
        again = import_ratings(store, path, pdsqi9)
        assert (again.new, again.changed, again.unchanged) == (0, 0, 11)
        rows[1]["score"] = 1  # a correction of `accurate`
        fixed = import_ratings(store, _jsonl(tmp_path / "fixed.jsonl", rows), pdsqi9)
        assert (fixed.new, fixed.changed, fixed.unchanged) == (0, 1, 10)
        score = store.query(
            "SELECT score FROM human_ratings WHERE attribute = 'accurate' AND rater_id = 'dr_a'"
        )
    assert score == [{"score": 1.0}]
    assert _count(db_path) == 11


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (_rating("i1", "r1", "accuracy", 3), "field attribute: 'accuracy' is not a key"),
        (_rating("i1", "r1", "Accurate", 3), "did you mean 'accurate'?"),
        (_rating("i1", "r1", "accurate", 6), "field score: accurate must be a whole number"),
        (_rating("i1", "r1", "accurate", 0), "from 1 to 5, got 0"),
        (_rating("i1", "r1", "accurate", 3.5), "field score: accurate must be a whole number"),
        (_rating("i1", "r1", "voice_summ", 2), "voice_summ must be a whole number from 0 to 1"),
        (_rating("i1", "r1", "accurate", None), "field score: accurate may not be null"),
        (_rating("i1", "r1", "accurate", "high"), "field score: must be a number, got 'high'"),
        (_rating("i1", "r1", "accurate", True), "field score: must be a number, got True"),
        (_rating("", "r1", "accurate", 3), "field item_id: must not be empty"),
        ({"item_id": "i1", "attribute": "accurate", "score": 3}, "field rater_id: missing"),
        ({"item_id": "i1", "rater_id": "r1", "attribute": "accurate"}, "field score: missing"),
    ],
)
def test_bad_rating_names_file_line_and_field(
    tmp_path: Path, db_path: Path, pdsqi9: Rubric, row: dict[str, Any], expected: str
) -> None:
    path = _jsonl(tmp_path / "ratings.jsonl", [_rating("i0", "r1", "accurate", 4), row])
    with RunStore(db_path) as store, pytest.raises(InputError) as caught:
        import_ratings(store, path, pdsqi9)
    message = str(caught.value)
    assert f"{path}:line 2: " in message
    assert expected in message
    assert _count(db_path) == 0  # nothing written, not even the valid first line


def test_every_problem_is_listed(tmp_path: Path, pdsqi9: Rubric) -> None:
    rows = [
        _rating("i1", "r1", "accurate", 9),
        _rating("i1", "r1", "nonsense", 3),
        _rating("i1", "r1", "citation", 3),
        _rating("i1", "r1", "citation", 4),
    ]
    path = _jsonl(tmp_path / "ratings.jsonl", rows)
    with pytest.raises(InputError) as caught:
        load_human_ratings(path, pdsqi9)
    problems = caught.value.problems
    assert len(problems) == 3
    assert problems[0].startswith(f"{path}:line 1: field score")
    assert problems[1].startswith(f"{path}:line 2: field attribute")
    assert problems[2].startswith(f"{path}:line 4: field attribute: duplicate rating")
    assert f"(first at {path}:line 3)" in problems[2]


def test_gate_rules_follow_the_rubric(tmp_path: Path, pdsqi9: Rubric) -> None:
    ok = [
        _rating("i1", "r1", "abstraction", 0),
        _rating("i1", "r1", "synthesized", None),
        _rating("i2", "r1", "abstraction", 1),
        _rating("i2", "r1", "synthesized", 5),
        _rating("i3", "r1", "synthesized", None),  # no abstraction rating: null allowed
    ]
    assert len(load_human_ratings(_jsonl(tmp_path / "ok.jsonl", ok), pdsqi9)) == 5
    bad = [
        _rating("i1", "r1", "abstraction", 0),
        _rating("i1", "r1", "synthesized", 3),
        _rating("i2", "r1", "abstraction", 1),
        _rating("i2", "r1", "synthesized", None),
    ]
    path = _jsonl(tmp_path / "bad.jsonl", bad)
    with pytest.raises(InputError) as caught:
        load_human_ratings(path, pdsqi9)
    problems = caught.value.problems
    assert len(problems) == 2
    assert problems[0].startswith(f"{path}:line 2: field score: synthesized must be null")
    assert problems[1].startswith(f"{path}:line 4: field score: synthesized may be null only")


def test_csv_rows_and_null_spellings(tmp_path: Path, db_path: Path, pdsqi9: Rubric) -> None:
    path = tmp_path / "ratings.csv"
    path.write_text(
        "item_id,rater_id,attribute,score,comment\n"
        "i1,r1,abstraction,0,\n"
        "i1,r1,synthesized,NA,not needed\n"
        "i1,r2,abstraction,0,\n"
        "i1,r2,synthesized,,\n"
        "i1,r1,accurate,4,\n"
    )
    ratings = load_human_ratings(path, pdsqi9)
    assert [(r.rater_id, r.attribute, r.score) for r in ratings] == [
        ("r1", "abstraction", 0.0),
        ("r1", "synthesized", None),
        ("r2", "abstraction", 0.0),
        ("r2", "synthesized", None),
        ("r1", "accurate", 4.0),
    ]
    bad = tmp_path / "bad.csv"
    bad.write_text("item_id,rater_id,attribute,score\ni1,r1,accurate,4\ni1,r1,thorough,7\n")
    with RunStore(db_path) as store, pytest.raises(InputError) as caught:
        import_ratings(store, bad, pdsqi9)
    assert str(caught.value).startswith(f"{bad}:row 2: field score: thorough must be")
    assert _count(db_path) == 0


def test_parquet_is_read_through_duckdb(tmp_path: Path, db_path: Path, pdsqi9: Rubric) -> None:
    source = _jsonl(tmp_path / "src.jsonl", _full_set("item-7", "dr_z"))
    parquet = tmp_path / "ratings.parquet"
    duckdb.execute(
        f"COPY (SELECT * FROM read_json_auto('{source}')) TO '{parquet}' (FORMAT parquet)"
    )
    with RunStore(db_path) as store:
        summary = import_ratings(store, parquet, pdsqi9)
    assert (summary.rows, summary.items, summary.raters) == (11, 1, 1)


def test_empty_and_unknown_files(tmp_path: Path, pdsqi9: Rubric) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(InputError, match="no ratings"):
        load_human_ratings(empty, pdsqi9)
    with pytest.raises(InputError, match="no such file"):
        load_human_ratings(tmp_path / "missing.jsonl", pdsqi9)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"item_id": "i1"\n')
    with pytest.raises(InputError, match=r"broken.jsonl:line 1: not valid JSON"):
        load_human_ratings(broken, pdsqi9)
