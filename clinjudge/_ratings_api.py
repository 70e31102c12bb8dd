"""``clinjudge.import_ratings``: apart from ``_api``, so that `judge ratings import` loads the
store and the rubrics only, not the workflows, model clients and statistics (#39)."""

from __future__ import annotations

from pathlib import Path

from clinjudge._args import _db, _path, _text
from clinjudge.rubrics import load_rubric
from clinjudge.runs import ImportSummary, RunStore
from clinjudge.runs import import_ratings as store_ratings


def import_ratings(
    path: str | Path, *, rubric: str = "pdsqi9", db: str | Path | None = None
) -> ImportSummary:
    """Validate physicians' ratings against a rubric and store them; a file with any problem
    is rejected whole (nothing written). Re-importing replaces a rater's earlier scores.

    Args:
        path: JSONL, CSV or Parquet with item_id, rater_id, attribute, score.
        rubric: Built-in rubric name or rubric file.
        db: Database (default ``$CLINJUDGE_DB``, else runs/clinjudge.duckdb).
    """
    path = _path("path", path)
    chosen = load_rubric(_text("rubric", rubric))
    with RunStore(_db(db)) as store:
        return store_ratings(store, path, chosen)
