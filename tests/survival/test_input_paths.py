"""``--data`` names one file, literally; hostile nesting is a one-line input error.

DuckDB reads a file name as a glob: before, ``items[1].jsonl`` judged ``items1.jsonl`` and
``x_*.jsonl`` judged every match. Each case builds the decoy files next to the named one and
checks that exactly the named file's items are read, for each input format.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from clinjudge.cli import app
from clinjudge.inputs import InputError, load_items
from clinjudge.rubrics import Item, load_rubric
from tests.factories import make_items, write_jsonl

RUBRIC = load_rubric("pdsqi9")


def _write(path: Path, items: list[Item]) -> Path:
    if path.suffix == ".jsonl":
        return write_jsonl(path, items)
    rows = [
        {k: json.dumps(v) if isinstance(v, list | dict) else v for k, v in row.items()}
        for row in (i.model_dump(mode="json", exclude_none=True) for i in items)
    ]
    if path.suffix == ".csv":
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
@pytest.mark.parametrize(
    ("named", "decoys"),
    [
        ("items[1]", ["items1"]),
        ("x_*", ["x_a", "x_b"]),
        ("x_?", ["x_a"]),
        ("{a,b}", ["a", "b"]),
    ],
)
def test_data_path_is_literal(tmp_path: Path, suffix: str, named: str, decoys: list[str]) -> None:
    target = _write(tmp_path / f"{named}{suffix}", make_items(2, prefix="named"))
    for number, decoy in enumerate(decoys):
        _write(tmp_path / f"{decoy}{suffix}", make_items(3, prefix=f"decoy{number}"))
    items = load_items(target, RUBRIC)
    assert sorted(i.id for i in items) == ["named-0000", "named-0001"]


def test_missing_literal_path_is_not_globbed(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "x_a.jsonl", make_items(1))
    with pytest.raises(InputError, match="no such file"):
        load_items(tmp_path / "x_*.jsonl", RUBRIC)


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_deeply_nested_json_line_is_an_input_error(tmp_path: Path) -> None:
    data = tmp_path / "deep.jsonl"
    good = make_items(1)[0].model_dump_json()
    data.write_text(good + "\n" + '{"id": "d", "summary": "s", "meta": ' + _deep(100_000) + "}\n")
    with pytest.raises(InputError) as caught:
        load_items(data, RUBRIC)
    assert f"{data}:line 2" in str(caught.value)


def test_deeply_nested_json_cell_is_an_input_error(tmp_path: Path) -> None:
    data = tmp_path / "deep.csv"
    data.write_text(f'id,summary,specialty,notes\nd,s,x,"{_deep(100_000)}"\n', encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load_items(data, RUBRIC)
    assert "row 1" in str(caught.value) and "notes" in str(caught.value)


def test_cli_reports_deep_nesting_in_one_line(tmp_path: Path) -> None:
    data = tmp_path / "deep.jsonl"
    data.write_text('{"id": "d", "summary": "s", "meta": ' + _deep(100_000) + "}\n")
    result = CliRunner().invoke(
        app, ["run", "--data", str(data), "--model", "mock/judge", "--db", str(tmp_path / "r.db")]
    )
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "line 1" in result.output
