"""`judge agree --ratings FILE --judge J` prints the table `judge agree RUN` prints (JSON only
with --json): the same study, once as a run with imported ratings and once as a standalone
file holding the judge's final scores as rater J, gives the same rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli._helpers import invoke
from tests.ratings_data import final_scores, write_ratings

BOOT = "50"
LIKERT = ["citation", "accurate", "thorough", "useful", "organized", "comprehensible", "succinct"]
# Columns whose numbers do not depend on how the scale is declared: a run declares its rubric's
# points (1-5, which AC2 counts), a standalone file only the scores it holds.
SAME = ["units", "ICC(3,k)", "95% CI", "alpha ord.", "median diff", "Wilcoxon p"]


def _physicians(finals: dict[tuple[str, str], float | None]) -> list[dict]:
    """Three raters off the judge by different amounts, so that the statistics are not 1."""
    rows = []
    for index, ((item, attribute), value) in enumerate(sorted(finals.items())):
        if attribute not in LIKERT:
            continue
        assert value is not None
        for rater, shift in (("dr_a", 0), ("dr_b", index % 3 - 1), ("dr_c", (index * 7) % 3 - 1)):
            score = min(5, max(1, int(value) + shift))
            rows.append(
                {"item_id": item, "rater_id": rater, "attribute": attribute, "score": score}
            )
    return rows


@pytest.fixture
def study(items_file: Path, db_path: Path, tmp_path: Path) -> tuple[str, Path]:
    """A run with imported ratings, and the same study as one standalone file."""
    run = invoke(
        "run", "--data", str(items_file), "--model", "mock/judge", "--db", str(db_path),
        "--samples", "3", "--no-progress",
    )  # fmt: skip
    assert run.exit_code == 0, run.stderr
    run_id = run.stdout.strip()
    finals = final_scores(db_path, run_id)
    humans = _physicians(finals)
    imported = invoke(
        "ratings", "import", str(write_ratings(tmp_path / "h.jsonl", humans)), "--db", str(db_path)
    )
    assert imported.exit_code == 0, imported.stderr
    judge = [
        {"item_id": item, "rater_id": "llm", "attribute": attribute, "score": value}
        for (item, attribute), value in sorted(finals.items())
        if attribute in LIKERT
    ]
    return run_id, write_ratings(tmp_path / "study.jsonl", humans + judge)


def _rows(table: str) -> tuple[list[str], dict[str, list[str]]]:
    """The header and the body rows (by first cell) of a rich table printed as text."""
    header: list[str] = []
    rows: dict[str, list[str]] = {}
    for line in table.splitlines():
        if line.startswith("┃"):
            header = [c.strip() for c in line.strip("┃").split("┃")]
        elif line.startswith("│"):
            cells = [c.strip() for c in line.strip("│").split("│")]
            rows[cells[0]] = cells
    return header, rows


def test_ratings_file_prints_the_run_table(study: tuple[str, Path], db_path: Path) -> None:
    run_id, path = study
    by_run = invoke("agree", run_id, "--db", str(db_path), "--boot", BOOT)
    by_file = invoke("agree", "--ratings", str(path), "--judge", "llm", "--boot", BOOT)
    assert by_run.exit_code == 0, by_run.stderr
    assert by_file.exit_code == 0, by_file.stderr
    with pytest.raises(json.JSONDecodeError):
        json.loads(by_file.stdout)  # a table, not JSON
    run_header, run_rows = _rows(by_run.stdout)
    file_header, file_rows = _rows(by_file.stdout)
    assert file_header == run_header
    assert set(LIKERT) <= set(file_rows)
    columns = [run_header.index(name) for name in SAME]
    for attribute in LIKERT:
        got = [file_rows[attribute][i] for i in columns]
        assert got == [run_rows[attribute][i] for i in columns], attribute
    assert any(run_rows[a][run_header.index("ICC(3,k)")] not in ("1.000", "-") for a in LIKERT)


def test_ratings_file_json_only_with_the_flag(study: tuple[str, Path]) -> None:
    _, path = study
    result = invoke("agree", "--ratings", str(path), "--judge", "llm", "--boot", BOOT, "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(LIKERT) <= set(data["per_attribute"])
