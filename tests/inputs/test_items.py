"""load_items: JSONL, CSV and Parquet inputs, and errors that name file, line or row, and field."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from clinjudge.inputs import InputError, load_items
from clinjudge.rubrics import Rubric
from tests.factories import make_items, write_jsonl


def _record(item_id: str = "a", **overrides: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": item_id,
        "notes": ["Note one.", "Note two."],
        "summary": "A summary [Note 1].",
        "specialty": "Cardiology",
    }
    record.update(overrides)
    return {k: v for k, v in record.items() if v is not None}


def _jsonl(path: Path, lines: list[Any]) -> Path:
    """Each entry is a dict (dumped) or a raw string line."""
    path.write_text(
        "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    )
    return path


def _problems(path: Path, rubric: Rubric) -> list[str]:
    with pytest.raises(InputError) as info:
        load_items(path, rubric)
    return info.value.problems


def _csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


# -- valid files -------------------------------------------------------------------------------


def test_jsonl_loads(tmp_path: Path, pdsqi9: Rubric) -> None:
    items = make_items(4)
    loaded = load_items(write_jsonl(tmp_path / "items.jsonl", items), pdsqi9)
    assert loaded == items


def test_jsonl_blank_lines_and_extras(tmp_path: Path, pdsqi9: Rubric) -> None:
    path = _jsonl(
        tmp_path / "x.jsonl",
        [
            "",
            _record(
                "a",
                notes=[{"id": "n1", "text": "First."}, {"id": 7, "text": "Second."}],
                meta={"site": "A"},
                vendor="v1",
                reference="ref",
            ),
            "   ",
            _record(12),
        ],
    )
    a, b = load_items(path, pdsqi9)
    assert [n.id for n in a.notes] == ["n1", "7"]
    assert (a.meta, a.vendor, a.reference) == ({"site": "A"}, "v1", "ref")
    assert b.id == "12"
    assert [n.id for n in b.notes] == ["1", "2"]


def test_csv_loads_json_cells(tmp_path: Path, pdsqi9: Rubric) -> None:
    path = _csv(
        tmp_path / "items.csv",
        ["id", "notes", "summary", "specialty", "meta"],
        [
            [
                "a",
                json.dumps(["n1", "n2"]),
                "Summary, with a comma\nand a newline.",
                "PC",
                json.dumps({"k": 1}),
            ],
            ["b", json.dumps([{"id": "x", "text": "t"}]), "s", "PC", ""],
        ],
    )
    a, b = load_items(path, pdsqi9)
    assert [(n.id, n.text) for n in a.notes] == [("1", "n1"), ("2", "n2")]
    assert a.summary == "Summary, with a comma\nand a newline."
    assert a.meta == {"k": 1}
    assert b.notes[0].id == "x"
    assert b.meta == {}


def test_parquet_notes_as_strings(tmp_path: Path, pdsqi9: Rubric) -> None:
    path = tmp_path / "items.parquet"
    pq.write_table(
        pa.table(
            {
                "id": ["a", "b"],
                "notes": [["n1", "n2"], ["n3"]],
                "summary": ["s1", "s2"],
                "specialty": ["PC", "PC"],
            }
        ),
        path,
    )
    a, b = load_items(path, pdsqi9)
    assert [n.text for n in a.notes] == ["n1", "n2"]
    assert [n.id for n in b.notes] == ["1"]


def test_parquet_notes_as_structs_and_meta_struct(tmp_path: Path, pdsqi9: Rubric) -> None:
    path = tmp_path / "items.parquet"
    pq.write_table(
        pa.table(
            {
                "id": ["a", "b"],
                "notes": [
                    [{"id": "x", "text": "t1"}, {"id": "y", "text": "t2"}],
                    [{"id": "z", "text": "t3"}],
                ],
                "summary": ["s1", "s2"],
                "specialty": ["PC", "ED"],
                "meta": [{"site": "A"}, {"site": "B"}],
                "vendor": ["v", None],
            }
        ),
        path,
    )
    a, b = load_items(path, pdsqi9)
    assert [(n.id, n.text) for n in a.notes] == [("x", "t1"), ("y", "t2")]
    assert (a.meta, b.meta) == ({"site": "A"}, {"site": "B"})
    assert (a.vendor, b.vendor) == ("v", None)


def test_parquet_written_by_duckdb(tmp_path: Path, pdsqi9: Rubric) -> None:
    import duckdb

    path = tmp_path / "d.parquet"
    duckdb.sql(
        "SELECT 'q' AS id, ['alpha', 'beta'] AS notes, 'sum' AS summary, 'PC' AS specialty"
    ).write_parquet(str(path))
    (item,) = load_items(path, pdsqi9)
    assert [n.text for n in item.notes] == ["alpha", "beta"]


# -- JSONL errors ------------------------------------------------------------------------------


def test_malformed_json_line_counts_blank_lines(tmp_path: Path, pdsqi9: Rubric) -> None:
    broken = '{"id": "b", "summary": '
    path = _jsonl(tmp_path / "bad.jsonl", [_record("a"), "", "", broken])
    # Expecting a value after "summary": at the end of the line (column 24).
    assert _problems(path, pdsqi9) == [
        f"{path}:line 4: not valid JSON (Expecting value at column {len(broken) + 1})"
    ]


def test_json_syntax_errors_do_not_hide_other_problems(tmp_path: Path, pdsqi9: Rubric) -> None:
    path = _jsonl(
        tmp_path / "mixed.jsonl",
        [
            _record("a", summary=None),  # 1: a field problem before the first syntax error
            '{"id": "b", "summary": "x" "notes": []}',  # 2: a comma missing
            _record("c"),  # 3: fine
            _record("d", specialty=None),  # 4: a rubric input missing
            "{'id': 'e'}",  # 5: single quotes are not JSON
            _record("c"),  # 6: a duplicate of line 3
        ],
    )
    problems = _problems(path, pdsqi9)
    assert [p.split(": ")[0] for p in problems] == [
        f"{path}:line {n}" for n in (1, 2, 4, 5, 6)
    ]  # every wrong line, in file order
    assert "field summary" in problems[0]
    assert "not valid JSON (Expecting ',' delimiter at column 28)" in problems[1]
    assert "field specialty" in problems[2]
    assert "not valid JSON (Expecting property name enclosed in double quotes" in problems[3]
    assert "field id: duplicate id 'c'" in problems[4]


def test_syntax_and_field_problems_share_the_limit(tmp_path: Path, pdsqi9: Rubric) -> None:
    lines: list[Any] = []
    for n in range(30):  # even lines broken JSON, odd lines without a summary
        lines.append('{"id": ' if n % 2 == 0 else _record(f"i{n}", summary=None))
    path = _jsonl(tmp_path / "many.jsonl", lines)
    with pytest.raises(InputError) as info:
        load_items(path, pdsqi9)
    assert len(info.value.problems) == 30
    shown = str(info.value).splitlines()
    assert len(shown) == 21 and shown[-1] == "... and 10 more problems"
    assert [line.split(": ")[0] for line in shown[:20]] == [
        f"{path}:line {n}" for n in range(1, 21)
    ]
    assert "not valid JSON" in shown[0] and "field summary" in shown[1]


def test_non_object_line(tmp_path: Path, pdsqi9: Rubric) -> None:
    path = _jsonl(tmp_path / "x.jsonl", [_record("a"), "[1, 2]"])
    assert _problems(path, pdsqi9) == [f"{path}:line 2: a record must be a JSON object"]


@pytest.mark.parametrize(
    ("record", "field", "message"),
    [
        (_record("a", summary=None), "summary", "Field required"),
        (_record("a", summary=""), "summary", "at least 1 character"),
        (_record("a", colour="red"), "colour", "Extra inputs are not permitted"),
        (_record("a", notes={"text": "x"}), "notes", "valid list"),
        (_record("a", notes=[{"id": "1"}]), "notes.0.text", "Field required"),
        (_record("a", notes=["ok", ""]), "notes.1.text", "at least 1 character"),
        (_record("a", specialty=None), "specialty", "rubric pdsqi9 needs a specialty"),
        (_record("a", notes=[]), "notes", "needs at least one source note"),
        (_record(""), "id", ""),  # blank cells mean "not given"
    ],
    ids=[
        "missing_summary",
        "empty_summary",
        "unknown_field",
        "notes_not_list",
        "note_without_text",
        "empty_note",
        "missing_specialty",
        "no_notes",
        "empty_id",
    ],
)
def test_jsonl_field_errors(
    tmp_path: Path, pdsqi9: Rubric, record: dict, field: str, message: str
) -> None:
    path = _jsonl(tmp_path / "x.jsonl", [_record("ok"), "", record])
    problems = _problems(path, pdsqi9)
    prefix = f"{path}:line 3: field {field}: "
    assert any(p.startswith(prefix) and message in p for p in problems), problems
    assert all(":line 3:" in p for p in problems), problems


def test_duplicate_ids_name_both_places(tmp_path: Path, pdsqi9: Rubric) -> None:
    path = _jsonl(tmp_path / "x.jsonl", [_record("a"), _record("b"), _record("a")])
    (problem,) = _problems(path, pdsqi9)
    assert problem.startswith(f"{path}:line 3: field id: duplicate id 'a'")
    assert f"(first at {path}:line 1)" in problem


def test_every_problem_is_reported(tmp_path: Path, pdsqi9: Rubric) -> None:
    path = _jsonl(
        tmp_path / "x.jsonl",
        [_record("a", summary=None), _record("b"), _record("c", specialty=None)],
    )
    problems = _problems(path, pdsqi9)
    assert [p.split(": field ")[0] for p in problems] == [f"{path}:line 1", f"{path}:line 3"]


def test_more_than_20_problems_are_truncated(tmp_path: Path, pdsqi9: Rubric) -> None:
    path = _jsonl(tmp_path / "x.jsonl", [_record(f"i{n}", summary=None) for n in range(25)])
    with pytest.raises(InputError) as info:
        load_items(path, pdsqi9)
    lines = str(info.value).splitlines()
    assert len(info.value.problems) == 25
    assert len(lines) == 21
    assert lines[0].startswith(f"{path}:line 1: field summary")
    assert lines[-1] == "... and 5 more problems"


def test_exactly_20_problems_are_not_truncated(tmp_path: Path, pdsqi9: Rubric) -> None:
    path = _jsonl(tmp_path / "x.jsonl", [_record(f"i{n}", summary=None) for n in range(20)])
    with pytest.raises(InputError) as info:
        load_items(path, pdsqi9)
    assert "more problems" not in str(info.value)
    assert len(str(info.value).splitlines()) == 20


# -- CSV and Parquet errors --------------------------------------------------------------------


def test_csv_record_of_three_megabytes_is_read(tmp_path: Path, pdsqi9: Rubric) -> None:
    # A long chart exported as one CSV row: DuckDB's default reader refuses rows over 2 MB; the
    # smaller read buffer that bounds the reader's memory (CSV_BUFFER_BYTES) takes it.
    note = "Day 1: stable. " * 200_000  # 3 MB
    path = _csv(
        tmp_path / "items.csv",
        ["id", "notes", "summary", "specialty"],
        [
            ["long", json.dumps([note]), "One line [Note 1].", "PC"],
            ["short", json.dumps(["n"]), "s", "PC"],
        ],
    )
    long, short = load_items(path, pdsqi9)
    assert (long.notes[0].text, short.id) == (note, "short")


def test_csv_record_beyond_the_buffer_is_refused_without_its_text(
    tmp_path: Path, pdsqi9: Rubric
) -> None:
    # Past what the reader takes (~4 MB), the refusal names the file, never the record's text
    # (DuckDB's message quotes the whole line on its next lines).
    note = "PATIENT-TEXT " * 500_000  # 6.5 MB
    path = _csv(
        tmp_path / "items.csv",
        ["id", "notes", "summary", "specialty"],
        [["huge", json.dumps([note]), "s", "PC"]],
    )
    with pytest.raises(InputError) as caught:
        load_items(path, pdsqi9)
    message = str(caught.value)
    assert message.startswith(f"{path}: cannot read:"), message
    assert "PATIENT-TEXT" not in message and len(message) < 300


def test_csv_bad_json_in_notes_cell(tmp_path: Path, pdsqi9: Rubric) -> None:
    path = _csv(
        tmp_path / "x.csv",
        ["id", "notes", "summary", "specialty"],
        [
            ["a", json.dumps(["n"]), "s", "PC"],
            ["b", "[not json", "s", "PC"],
        ],
    )
    problems = _problems(path, pdsqi9)
    assert problems[0].startswith(f"{path}:row 2: field notes: not valid JSON")


def test_csv_missing_values_name_row_and_field(tmp_path: Path, pdsqi9: Rubric) -> None:
    path = _csv(
        tmp_path / "x.csv",
        ["id", "notes", "summary", "specialty", "extra"],
        [
            ["a", json.dumps(["n"]), "s", "", ""],
            ["b", json.dumps(["n"]), "", "PC", "surprise"],
        ],
    )
    problems = _problems(path, pdsqi9)
    assert f"{path}:row 1: field specialty: rubric pdsqi9 needs a specialty" in problems
    assert any(p.startswith(f"{path}:row 2: field summary:") for p in problems), problems
    assert any(p.startswith(f"{path}:row 2: field extra: Extra inputs") for p in problems)


def test_csv_duplicate_ids(tmp_path: Path, pdsqi9: Rubric) -> None:
    path = _csv(
        tmp_path / "x.csv",
        ["id", "notes", "summary", "specialty"],
        [
            ["a", json.dumps(["n"]), "s", "PC"],
            ["b", json.dumps(["n"]), "s", "PC"],
            ["a", json.dumps(["n"]), "s", "PC"],
        ],
    )
    assert _problems(path, pdsqi9) == [
        f"{path}:row 3: field id: duplicate id 'a' (first at {path}:row 1)"
    ]


def test_parquet_errors_name_row_and_field(tmp_path: Path, pdsqi9: Rubric) -> None:
    path = tmp_path / "x.parquet"
    pq.write_table(
        pa.table(
            {
                "id": ["a", "b", "c"],
                "notes": [
                    [{"id": "x", "text": "t"}],
                    [{"id": "y", "text": None}],
                    [{"id": "z", "text": "t"}],
                ],
                "summary": ["s", "s", None],
                "specialty": ["PC", "PC", "PC"],
            }
        ),
        path,
    )
    problems = _problems(path, pdsqi9)
    assert any(p.startswith(f"{path}:row 2: field notes.0.text:") for p in problems), problems
    assert f"{path}:row 3: field summary: Field required" in problems


# -- file-level errors -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["empty.jsonl", "empty.csv"])
def test_empty_file(tmp_path: Path, pdsqi9: Rubric, name: str) -> None:
    path = tmp_path / name
    path.write_text("" if name.endswith(".jsonl") else "id,notes,summary,specialty\n")
    assert _problems(path, pdsqi9) == [f"{path}: no records"]


def test_only_blank_lines(tmp_path: Path, pdsqi9: Rubric) -> None:
    path = tmp_path / "blank.jsonl"
    path.write_text("\n  \n\n")
    assert _problems(path, pdsqi9) == [f"{path}: no records"]


def test_unsupported_extension(tmp_path: Path, pdsqi9: Rubric) -> None:
    path = tmp_path / "items.xlsx"
    path.write_text("whatever")
    (problem,) = _problems(path, pdsqi9)
    assert problem.startswith(f"{path}: unsupported format '.xlsx'")


def test_missing_file(tmp_path: Path, pdsqi9: Rubric) -> None:
    path = tmp_path / "nope.jsonl"
    assert _problems(path, pdsqi9) == [f"{path}: no such file"]


def test_corrupt_parquet(tmp_path: Path, pdsqi9: Rubric) -> None:
    path = tmp_path / "x.parquet"
    path.write_bytes(b"not parquet at all")
    (problem,) = _problems(path, pdsqi9)
    assert problem.startswith(f"{path}: cannot read:")
