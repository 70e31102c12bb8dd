"""Statistics that cannot be computed (constant scores) are reported as undefined with the
reason, never as numpy warnings."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from tests.cli._helpers import invoke


def test_constant_scores_are_undefined_with_reason(items_file: Path, db_path: Path) -> None:
    run = invoke(
        "run", "--data", str(items_file), "--model", "mock/judge", "--db", str(db_path),
        "--no-progress",
    )  # fmt: skip
    assert run.exit_code == 0, run.stderr
    run_id = run.stdout.strip()
    # Judge and physicians all give accurate = 3: no variance, so ICC and alpha are 0/0.
    con = duckdb.connect(str(db_path))
    con.execute("UPDATE judgments SET value = 3 WHERE final AND attribute = 'accurate'")
    con.close()
    ratings = items_file.parent / "ratings.jsonl"
    rows = [
        {"item_id": f"item-{n:04d}", "rater_id": rater, "attribute": "accurate", "score": 3}
        for n in range(6)
        for rater in ("a", "b")
    ]
    ratings.write_text("".join(json.dumps(r) + "\n" for r in rows))
    imported = invoke("ratings", "import", str(ratings), "--db", str(db_path))
    assert imported.exit_code == 0, imported.stderr

    agree = invoke("agree", run_id, "--db", str(db_path), "--boot", "50")
    assert agree.exit_code == 0, agree.stderr
    assert "RuntimeWarning" not in agree.stderr + agree.stdout
    lines = [line for line in agree.stdout.splitlines() if line.startswith("ICC(3,k) undefined")]
    assert lines and "accurate" in lines[0] and "zero variance" in lines[0]
    row = next(line for line in agree.stdout.splitlines() if "accurate" in line and "│" in line)
    assert "undefined" in row

    for args in (["compare", run_id], ["report", run_id, "--out", str(db_path.parent / "r")]):
        result = invoke(*args, "--db", str(db_path), "--boot", "50")
        assert result.exit_code == 0, result.stderr
        assert "RuntimeWarning" not in result.stderr + result.stdout
