"""Synthetic physicians' ratings built from a run's final scores, for agreement tests.

Raters ``dr_a`` and ``dr_b`` give exactly the run's final score; ``dr_c`` moves every Likert
score one point (down from the top, up otherwise). The human median therefore equals the
judge's final score on every unit, so the judge's ICC(3,k) against the median is 1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb

LIKERT_MAX = 5


def final_scores(db: Path, run_id: str) -> dict[tuple[str, str], float | None]:
    """(item_id, attribute) -> the run's final value."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute(
            "SELECT item_id, attribute, value FROM judgments WHERE run_id = ? AND final",
            [run_id],
        ).fetchall()
    finally:
        con.close()
    return {(item, attribute): value for item, attribute, value in rows}


def ratings_matching(db: Path, run_id: str) -> list[dict[str, Any]]:
    """Long-format ratings whose median equals the run's finals (see module docstring)."""
    finals = final_scores(db, run_id)
    rows: list[dict[str, Any]] = []
    for (item, attribute), value in sorted(finals.items()):
        assert value is None or float(value).is_integer(), "use an odd number of samples"
        for rater in ("dr_a", "dr_b", "dr_c"):
            score = value
            binary = attribute in {"abstraction", "voice_summ", "voice_note"}
            if rater == "dr_c" and value is not None and not binary:
                score = value - 1 if value == LIKERT_MAX else value + 1
            rows.append(
                {
                    "item_id": item,
                    "rater_id": rater,
                    "attribute": attribute,
                    "score": None if score is None else int(score),
                }
            )
    return rows


def write_ratings(path: Path, rows: list[dict[str, Any]]) -> Path:
    """Write rows as JSONL."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
