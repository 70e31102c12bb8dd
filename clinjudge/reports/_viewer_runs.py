"""Data of the runs page: every run with its headline numbers, filtered, sorted and paged."""

from __future__ import annotations

import json
from typing import Any

from clinjudge.reports._viewer_paging import clamp_page
from clinjudge.runs import RunStore, status_label

RUN_SORTS: dict[str, str] = {
    "created": "created_at",
    "name": "name",
    "status": "status",
    "mode": "mode",
    "rubric": "rubric",
    "items": "n_items",
}
"""Sortable columns of the runs page (URL name to ``runs`` column)."""


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
        sort: A key of :data:`RUN_SORTS`.
        desc: Sort descending.
        query: Text matched (case-insensitive) against id, name, rubric, mode and models.
        status: Only runs with this status.
        page: Page number.
        per_page: Runs per page.
        only: Just these runs (full ids).
    """
    column = RUN_SORTS.get(sort, "created_at")
    where: list[str] = ["1=1"]
    params: list[Any] = []
    if query:
        # A plain substring test: `%` and `_` in the query are text, not LIKE wildcards.
        where.append(
            "contains(lower(run_id || ' ' || coalesce(name, '') || ' ' || coalesce(rubric, '') "
            "|| ' ' || coalesce(mode, '') || ' ' || coalesce(CAST(models AS VARCHAR), '')), "
            "lower(?))"
        )
        params.append(query)
    if status:
        where.append("status = ?")
        params.append(status)
    if only is not None:
        where.append("run_id IN (SELECT unnest(?))")
        params.append(list(only))
    clause = " AND ".join(where)
    total = store.query(f"SELECT count(*) AS n FROM runs WHERE {clause}", params)[0]["n"]
    paging = clamp_page(page, total, per_page)
    order = "DESC" if desc else "ASC"
    runs = store.query(
        f"SELECT run_id, name, created_at, status, mode, rubric, rubric_version, models, "
        f"simulated, n_items, n_samples FROM runs WHERE {clause} "
        f"ORDER BY {column} {order} NULLS LAST, run_id LIMIT ? OFFSET ?",
        [*params, paging.per_page, paging.offset],
    )
    ids = [r["run_id"] for r in runs]
    stats = _run_stats(store, ids)
    for run in runs:
        run["models"] = _loads(run["models"]) or {}
        run.update(stats.get(run["run_id"], {}))
        valid = run.get("items_ok") or 0
        run["status_text"] = status_label(run["status"], run["n_items"] or 0, valid)
    statuses = [r["status"] for r in store.query("SELECT DISTINCT status FROM runs ORDER BY 1")]
    return {"runs": runs, "paging": paging, "statuses": statuses}


def _run_stats(store: RunStore, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Items ok/failed, tokens, cost and per-item latency percentiles of the given runs.

    An item's final has one row per attribute, all with the item's status, so final rows per
    status divided by the number of attributes counts items without a DISTINCT over item ids.
    """
    if not run_ids:
        return {}
    out: dict[str, dict[str, Any]] = {rid: {} for rid in run_ids}
    for row in store.query(
        """
        SELECT run_id, coalesce(sum(n) FILTER (WHERE status = 'ok'), 0) AS items_ok,
               coalesce(sum(n) FILTER (WHERE status = 'failed'), 0) AS items_failed
        FROM (SELECT run_id, status, count(*) // count(DISTINCT attribute) AS n
              FROM judgments WHERE run_id IN (SELECT unnest(?)) AND final
              GROUP BY run_id, status)
        GROUP BY run_id""",
        [run_ids],
    ):
        out[row.pop("run_id")].update(row)
    for row in store.query(
        """
        SELECT run_id, sum(t) AS latency_s, sum(c) AS cost_usd, sum(tin) AS tokens_in,
               sum(tout) AS tokens_out, sum(unpriced) AS calls_unpriced,
               quantile_cont(t, 0.5) AS item_latency_p50_s,
               quantile_cont(t, 0.95) AS item_latency_p95_s
        FROM (SELECT run_id, item_id, sum(latency_s) AS t, sum(cost_usd) AS c,
                     coalesce(sum(prompt_tokens), 0) AS tin,
                     coalesce(sum(completion_tokens), 0) AS tout,
                     count(*) FILTER (WHERE status = 'ok' AND cost_usd IS NULL) AS unpriced
              FROM calls WHERE run_id IN (SELECT unnest(?)) GROUP BY run_id, item_id)
        GROUP BY run_id""",
        [run_ids],
    ):
        out[row.pop("run_id")].update(row)
    return out


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value
