"""`judge compare` on 80- and 100-column terminals: every line fits, no cell is cut to "…",
and every value of `compare --json` is still there whole."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from rich.cells import cell_len

from tests.cli._helpers import JUDGE, invoke
from tests.ratings_data import ratings_matching, write_ratings

pytestmark = pytest.mark.needs_judge_script

BOOT = "50"
LONG_NAME = "cardiology-vendor-comparison-with-a-long-name"
HEADER_WORDS = [
    "run", "name", "rubric", "mode", "model", "shots", "samples", "ICC(3,k)", "95%", "CI",
    "alpha", "AC2", "ord.", "mean", "|diff|", "failed", "cost/item", "latency/item",
]  # fmt: skip


def _run(data: Path, db: Path, *extra: str) -> str:
    result = invoke(
        "run", "--data", str(data), "--model", "mock/judge", "--db", str(db), "--samples", "3",
        "--no-progress", *extra,
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return result.stdout.strip()


@pytest.fixture
def three_runs(items_file: Path, db_path: Path, tmp_path: Path) -> list[str]:
    first = _run(items_file, db_path)
    ratings = write_ratings(tmp_path / "ratings.jsonl", ratings_matching(db_path, first))
    imported = invoke("ratings", "import", str(ratings), "--db", str(db_path))
    assert imported.exit_code == 0, imported.stderr
    second = _run(items_file, db_path, "--name", LONG_NAME, "--model", "mock/other-judge-model")
    third = _run(items_file, db_path, "--mode", "panel", "--name", "panel")
    return [first, second, third]


def _compare_at(width: int, args: list[str]) -> str:
    """stdout of `judge ARGS` in a process of its own: the console reads the terminal width
    (COLUMNS) once, when it starts."""
    env = {**os.environ, "COLUMNS": str(width), "NO_COLOR": "1"}
    result = subprocess.run(
        [JUDGE, *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _expected_cells(row: dict) -> list[str]:
    """Cells the table must show whole, formatted here from the JSON numbers."""
    cells = [row["run_id"], f"{row['failed_samples']}/{row['samples_total']}"]
    for key in ("icc3k", "alpha_ordinal", "ac2_ordinal", "mean_abs_diff"):
        if row[key] is not None:
            cells.append(f"{row[key]:.3f}")
    if row["icc3k_ci95"]:
        low, high = row["icc3k_ci95"]
        cells.append(f"[{low:.2f}, {high:.2f}]")
    cells.append(f"${row['cost_per_item_usd']:.4f}")
    cells.append(f"{row['latency_per_item_s']:.2f} s")
    return cells


@pytest.mark.parametrize("width", [80, 100])
def test_compare_fits_narrow_terminals_without_ellipses(
    three_runs: list[str], db_path: Path, width: int
) -> None:
    args = ["compare", *three_runs, "--db", str(db_path), "--boot", BOOT]
    out = _compare_at(width, args)
    assert "…" not in out
    too_wide = [line for line in out.splitlines() if cell_len(line) > width]
    assert not too_wide, too_wide
    rows = json.loads(invoke(*args, "--json").stdout)["runs"]
    assert rows[0]["icc3k"] is not None  # the rated run has real agreement numbers
    for row in rows:
        for cell in _expected_cells(row):
            assert cell in out, (cell, out)
    words = out.split()
    for word in HEADER_WORDS:
        assert word in words, word
    # A wrapped name still reads whole once its column's pieces are joined.
    assert LONG_NAME in _column_text(out, "name")


def _column_text(out: str, header: str) -> str:
    """The body cells of the column headed ``header`` (in whichever table has it), joined."""
    pieces, index = [], None
    for line in out.splitlines():
        if "┃" in line:
            cells = [c.strip() for c in line.split("┃")]
            if header in cells:
                index = cells.index(header)
        elif line.startswith("└"):
            index = None
        elif index is not None and "│" in line:
            pieces.append(line.split("│")[index].strip())
    return "".join(pieces)


def test_wide_terminal_keeps_one_table(three_runs: list[str], db_path: Path) -> None:
    out = _compare_at(250, ["compare", *three_runs, "--db", str(db_path), "--boot", BOOT])
    assert out.count("judge configurations") == 1
    assert "(1 of" not in out
    header = next(line for line in out.splitlines() if "ICC(3,k)" in line)
    assert "latency/item" in header and "name" in header
