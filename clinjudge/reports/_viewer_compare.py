"""Data of the compare page: runs side by side per item.

Disagreement between runs is computed in DuckDB over the final scores
(:func:`clinjudge.runs.disagreeing_items`): per item, the sum over attributes of the spread (max
minus min) of the runs' final values; the page shows the items with the largest disagreement
first. The agreement, cost and latency table is :func:`clinjudge.analysis.compare_runs`, the same
as ``judge compare``.
"""

from __future__ import annotations

from typing import Any

from clinjudge.reports._viewer_paging import page_window
from clinjudge.runs import RunStore, disagreeing_items, final_scores_of_runs, item_counts


def compare_items(
    store: RunStore, run_ids: list[str], *, page: int = 1, per_page: int = 50
) -> dict[str, Any]:
    """Items the runs share, largest disagreement first, with each run's final scores.

    Args:
        store: The run store.
        run_ids: Full run ids (two or more).
        page: Page number.
        per_page: Items per page.
    """
    paging, ranked = disagreeing_items(store, run_ids, page_window(page, per_page))
    ids = [r["item_id"] for r in ranked]
    values: dict[str, dict[str, dict[str, float | None]]] = {i: {} for i in ids}
    for score in final_scores_of_runs(store, run_ids, ids):
        values[score["item_id"]].setdefault(score["attribute"], {})[score["run_id"]] = score[
            "value"
        ]
    items = [{**row, "values": values[row["item_id"]]} for row in ranked]
    return {"items": items, "paging": paging, "items_per_run": item_counts(store, run_ids)}
