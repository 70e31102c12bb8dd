"""Data of the runs page: every run with its headline numbers, filtered, sorted and paged."""

from __future__ import annotations

import json
from typing import Any

from clinjudge.reports._viewer_paging import page_window
from clinjudge.runs import RunStore, status_label
from clinjudge.runs.report_reads import run_list, run_list_stats, run_statuses


def runs_page(
    store: RunStore,
    *,
    sort: str = "created",
    desc: bool = True,
    query: str = "",
    status: str = "",
    page: int = 1,
    per_page: int = 50,
    only: list[str] | None = None,
) -> dict[str, Any]:
    """Runs with their headline numbers, filtered, sorted and paged.

    Args:
        store: The run store.
        sort: One of :data:`clinjudge.runs.report_reads.RUN_SORTS`.
        desc: Sort descending.
        query: Text matched (case-insensitive) against id, name, rubric, mode and models.
        status: Only runs with this status.
        page: Page number.
        per_page: Runs per page.
        only: Just these runs (full ids).
    """
    window = page_window(page, per_page)
    paging, listed = run_list(
        store, window, sort=sort, desc=desc, text=query, status=status, only=only
    )
    stats = run_list_stats(store, [r["run_id"] for r in listed])
    runs: list[dict[str, Any]] = []
    for row in listed:
        run: dict[str, Any] = {**row, "models": _loads(row["models"]) or {}}
        run.update(stats.get(row["run_id"], {}))
        valid = run.get("items_ok") or 0
        run["status_text"] = status_label(run["status"], run["n_items"] or 0, valid)
        runs.append(run)
    return {"runs": runs, "paging": paging, "statuses": run_statuses(store)}


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value
