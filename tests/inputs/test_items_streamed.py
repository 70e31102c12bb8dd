"""JSONL items read a line at a time (issue 27): the reader's memory does not grow with the
file, and its lines are numbered as a reference splitter written here numbers them (LF, CR LF,
lone CR, a byte-order mark, blank lines), with every problem still named by file, line and
field.
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from clinjudge.inputs import InputError, load_items
from clinjudge.inputs._records import iter_records
from clinjudge.rubrics import Rubric
from tests.factories import make_items


def _reference_lines(data: bytes) -> list[tuple[int, str]]:
    """(line number, text) of the non-blank lines: LF, CR LF and a lone CR each end a line."""
    text = data.decode("utf-8").removeprefix("\ufeff")
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [(n, line) for n, line in enumerate(lines, start=1) if line.strip()]


@pytest.mark.parametrize(
    "layout",
    [
        "{0}\n{1}\n{2}\n",
        "{0}\r\n{1}\r\n\r\n{2}",
        "{0}\r{1}\r\r{2}\r",
        "\ufeff{0}\n\n   \n{1}\n\t\n{2}\n\n",
        "{0}\n{1}\r\n{2}\r",
    ],
)
def test_lines_are_numbered_as_the_reference_splits_them(tmp_path: Path, layout: str) -> None:
    records = [{"id": f"r{k}", "k": k} for k in range(3)]
    path = tmp_path / "r.jsonl"
    path.write_bytes(layout.format(*(json.dumps(r) for r in records)).encode("utf-8"))
    expected = [
        (f"{path}:line {n}", json.loads(text)) for n, text in _reference_lines(path.read_bytes())
    ]
    assert list(iter_records(path, [])) == expected
    assert [record for _, record in expected] == records


def test_json_the_parsers_disagreed_on_is_named(tmp_path: Path) -> None:
    path = tmp_path / "odd.jsonl"
    path.write_text('{"a": 1}\n{"a": 1,}\n{"a": "\\ud800"}\n{"a": "\\ud83d\\ude00"}\n')
    problems: list[str] = []
    records = list(iter_records(path, problems))
    # A trailing comma and half a surrogate pair are not JSON; a whole pair is.
    assert records == [(f"{path}:line 1", {"a": 1}), (f"{path}:line 4", {"a": "\U0001f600"})]
    assert [p.split(": ", 1)[0] for p in problems] == [f"{path}:line 2", f"{path}:line 3"]
    assert all("not valid JSON" in p for p in problems)


def test_bad_utf8_late_in_the_file_is_named(tmp_path: Path, pdsqi9: Rubric) -> None:
    lines = [json.dumps(i.model_dump(exclude_none=True)).encode() for i in make_items(900)]
    lines[876] = lines[876].replace(b"synthetic", b"synth\xe9tic", 1)
    path = tmp_path / "items.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(InputError) as caught:
        load_items(path, pdsqi9)
    (problem,) = caught.value.problems
    assert problem.startswith(f"{path}:line 877: not valid UTF-8 (byte 0xe9")


def test_reading_a_large_file_holds_a_bounded_amount(tmp_path: Path) -> None:
    def traced_peak(count: int) -> int:
        path = tmp_path / f"{count}.jsonl"
        note = "x" * 2000
        path.write_text("".join(json.dumps({"id": str(k), "n": note}) + "\n" for k in range(count)))
        tracemalloc.start()
        try:
            seen = sum(1 for _ in iter_records(path, []))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert seen == count
        return peak

    small, large = traced_peak(500), traced_peak(8000)
    # 16x the records (16 MB more text): the peak stays that of a few records.
    assert large < small + 1_000_000, (small, large)
