"""Data of a run's page: totals, score distributions, failures, flags and the item list.

Each function reads only the rows a page shows (``LIMIT``/``OFFSET`` over an ordered key) or
aggregates inside DuckDB, so a run of 100,000 items opens as fast as a small one.
"""

from __future__ import annotations

import json
from typing import Any

from clinjudge.analysis import final_score_counts, run_rubric
from clinjudge.judges.workflows import DECIDING_AGENTS
from clinjudge.reports._viewer_paging import clamp_page
from clinjudge.rubrics import Rubric
from clinjudge.runs import RunStore, StoreError

ITEM_FILTERS = ("all", "failed", "flagged")


def _histogram(values: list[tuple[float, int]], lo: float, hi: float, integer: bool) -> list:
    """Bins of a score distribution: one per scale point, or ten for proportions."""
    if integer:
        counts = {int(round(v)): 0 for v in range(int(lo), int(hi) + 1)}
        for value, n in values:
            counts[int(round(value))] = counts.get(int(round(value)), 0) + n
        return [(str(k), n) for k, n in sorted(counts.items())]
    bins = [0] * 10
    for value, n in values:
        index = min(int((value - lo) / ((hi - lo) or 1) * 10), 9)
        bins[max(index, 0)] += n
    width = (hi - lo) / 10
    return [(f"{lo + i * width:.1f}", n) for i, n in enumerate(bins)]


def distribution_charts(distributions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Histogram bins of each attribute's final scores, for the run page.

    Args:
        distributions: From :func:`clinjudge.analysis.score_distributions`.
    """
    out = []
    for d in distributions:
        numbers = list(d["counts"].items())
        proportion = d["scale"] == "proportion"
        lo, hi = (0.0, 1.0) if proportion else (float(d["min"]), float(d["max"]))
        # Medians of an even number of samples can be x.5; such values get their own bins.
        integer = not proportion and all(float(v).is_integer() for v, _ in numbers)
        if not integer and not proportion:
            bins = [(f"{v:g}", n) for v, n in numbers]
        else:
            bins = _histogram(numbers, lo, hi, integer)
        out.append(
            {
                "key": d["key"],
                "name": d["name"],
                "bins": bins,
                "n": d["n"],
                "missing": d["null"] + d["failed"],
                "mean": d["mean"],
            }
        )
    return out


def run_totals(store: RunStore, run_id: str, rubric: Rubric | None) -> dict[str, Any]:
    """The headline numbers of `judge runs show` for a run, in fewer scans of big tables.

    Items ok/failed come from the final judgments of the rubric's first attribute (every
    attribute of an item's final has the same status); calls are grouped by item once, giving
    the totals and the per-item latency and cost percentiles together.

    Returns:
        ``items_ok``, ``items_failed``, ``samples_ok``, ``samples_failed``, ``calls``,
        ``calls_failed``, ``tokens_in``, ``tokens_out``, ``tokens_estimated``, ``cost_usd``,
        ``calls_unpriced``, ``item_latency_p50_s``, ``item_latency_p95_s``,
        ``item_cost_p50_usd``, ``by_agent`` and ``final_counts`` (for the distributions).
    """
    counts = final_score_counts(store, run_id) if rubric is not None else []
    first = [r for r in counts if rubric is not None and r["attribute"] == rubric.keys[0]]
    totals: dict[str, Any] = {
        "items_ok": sum(r["n"] for r in first if r["status"] == "ok"),
        "items_failed": sum(r["n"] for r in first if r["status"] == "failed"),
        "final_counts": counts,
    }
    totals.update(
        store.query(
            # Counted as `judge runs show` counts them: the deciding agent's samples.
            "SELECT count(*) FILTER (WHERE status = 'ok') AS samples_ok, "
            "count(*) FILTER (WHERE status <> 'ok') AS samples_failed "
            "FROM samples WHERE run_id = ? AND sample > 0 AND agent IN (SELECT unnest(?))",
            [run_id, list(DECIDING_AGENTS)],
        )[0]
    )
    totals.update(
        store.query(
            """
            SELECT coalesce(sum(n), 0) AS calls, coalesce(sum(failed), 0) AS calls_failed,
                   coalesce(sum(tin), 0) AS tokens_in, coalesce(sum(tout), 0) AS tokens_out,
                   bool_or(estimated) AS tokens_estimated, sum(c) AS cost_usd,
                   coalesce(sum(unpriced), 0) AS calls_unpriced,
                   quantile_cont(t, 0.5) AS item_latency_p50_s,
                   quantile_cont(t, 0.95) AS item_latency_p95_s,
                   quantile_cont(c, 0.5) AS item_cost_p50_usd
            FROM (SELECT item_id, count(*) AS n, count(*) FILTER (WHERE status <> 'ok') AS failed,
                         sum(prompt_tokens) AS tin, sum(completion_tokens) AS tout,
                         bool_or(tokens_estimated) AS estimated, sum(latency_s) AS t,
                         sum(cost_usd) AS c,
                         count(*) FILTER (WHERE status = 'ok' AND cost_usd IS NULL) AS unpriced
                  FROM calls WHERE run_id = ? GROUP BY item_id)""",
            [run_id],
        )[0]
    )
    totals["by_agent"] = store.query(
        """
        SELECT role, agent, model, count(*) AS calls,
               coalesce(sum(prompt_tokens), 0) AS tokens_in,
               coalesce(sum(completion_tokens), 0) AS tokens_out,
               sum(cost_usd) AS cost_usd, coalesce(sum(latency_s), 0) AS latency_s_sum
        FROM calls WHERE run_id = ?
        GROUP BY role, agent, model ORDER BY role, agent, model""",
        [run_id],
    )
    return totals


def failure_groups(store: RunStore, run_id: str, examples: int = 5) -> list[dict[str, Any]]:
    """Failed samples grouped by reason, with the first few failing items of each."""
    return store.query(
        """
        SELECT coalesce(s.error, '(no reason recorded)') AS reason, count(*) AS samples,
               count(DISTINCT s.item_id) AS n_items,
               list(DISTINCT s.item_id ORDER BY s.item_id)[1:?] AS examples
        FROM samples s WHERE s.run_id = ? AND s.status <> 'ok'
        GROUP BY reason ORDER BY samples DESC, reason LIMIT 50""",
        [examples, run_id],
    )


def _item_filter(run_id: str, show: str, reason: str | None) -> tuple[str, list[Any]]:
    """SQL narrowing a run's items to those with a failed sample (of a reason) or flags."""
    if show == "failed":
        sql = "AND i.item_id IN (SELECT item_id FROM samples WHERE run_id = ? AND status <> 'ok'"
        params: list[Any] = [run_id]
        if reason:
            sql += " AND coalesce(error, '(no reason recorded)') = ?"
            params.append(reason)
        return sql + ")", params
    if show == "flagged":
        return "AND json_array_length(i.flags) > 0", []
    return "", []


def _steps_only(store: RunStore, run_id: str) -> bool:
    """A `judge prm score` run: step scores in ``prm_steps`` and no ``items`` rows."""
    if not store.has_table("prm_steps"):
        return False
    row = store.query(
        "SELECT (SELECT count(*) FROM (SELECT 1 FROM items WHERE run_id = ? LIMIT 1)) AS items, "
        "(SELECT count(*) FROM (SELECT 1 FROM prm_steps WHERE run_id = ? LIMIT 1)) AS steps",
        [run_id, run_id],
    )[0]
    return not row["items"] and bool(row["steps"])


def _scored_items(store: RunStore, run_id: str, page: int, per_page: int) -> dict[str, Any]:
    """One page of the items of a PRM scoring run, with their lowest step score."""
    total = store.query(
        "SELECT count(DISTINCT item_id) AS n FROM prm_steps WHERE run_id = ?", [run_id]
    )[0]["n"]
    paging = clamp_page(page, total, per_page)
    items = store.query(
        """
        SELECT item_id, row_number() OVER (ORDER BY item_id) - 1 AS position,
               count(DISTINCT candidate) AS candidates, min(score) AS lowest
        FROM prm_steps WHERE run_id = ? GROUP BY item_id ORDER BY item_id LIMIT ? OFFSET ?""",
        [run_id, paging.per_page, paging.offset],
    )
    for item in items:
        item.update(vendor=None, flags=[], scores=[], status="scored")
    return {"items": items, "paging": paging, "show": "all", "reason": None, "steps": True}


def item_rows(
    store: RunStore,
    run_id: str,
    keys: list[str],
    *,
    show: str = "all",
    reason: str | None = None,
    page: int = 1,
    per_page: int = 100,
) -> dict[str, Any]:
    """One page of a run's items with their final scores, status and flags.

    Args:
        store: The run store.
        run_id: Full run id.
        keys: Attribute keys, in column order.
        show: ``all``, ``failed`` (a sample failed) or ``flagged`` (text addresses the judge).
        reason: With ``failed``: only this failure reason.
        page: Page number.
        per_page: Items per page.
    """
    if _steps_only(store, run_id):
        return _scored_items(store, run_id, page, per_page)
    extra, params = _item_filter(run_id, show if show in ITEM_FILTERS else "all", reason)
    has_flags = store.has_column("items", "flags")
    if not has_flags and show == "flagged":
        extra = "AND false"
    total = store.query(
        f"SELECT count(*) AS n FROM items i WHERE i.run_id = ? {extra}", [run_id, *params]
    )[0]["n"]
    paging = clamp_page(page, total, per_page)
    flags = "i.flags" if has_flags else "NULL"
    items = store.query(
        f"""
        SELECT i.item_id, i.position, i.vendor, i.specialty, {flags} AS flags
        FROM items i WHERE i.run_id = ? {extra}
        ORDER BY i.position, i.item_id LIMIT ? OFFSET ?""",
        [run_id, *params, paging.per_page, paging.offset],
    )
    ids = [r["item_id"] for r in items]
    finals: dict[str, dict[str, Any]] = {i: {} for i in ids}
    status: dict[str, str] = {}
    if ids:
        for row in store.query(
            """
            SELECT item_id, attribute, value, status FROM judgments
            WHERE run_id = ? AND final AND item_id IN (SELECT unnest(?))
              AND item_id BETWEEN ? AND ?""",
            # The range is redundant but lets DuckDB skip row groups by their min/max.
            [run_id, ids, min(ids), max(ids)],
        ):
            finals[row["item_id"]][row["attribute"]] = row["value"]
            status[row["item_id"]] = row["status"]
    for item in items:
        item["flags"] = _loads(item["flags"]) or []
        item["scores"] = [finals[item["item_id"]].get(k) for k in keys]
        item["status"] = status.get(item["item_id"], "pending")
    return {"items": items, "paging": paging, "show": show, "reason": reason}


def flag_counts(store: RunStore, run_id: str) -> list[dict[str, Any]]:
    """How many items carry each kind of flag (text addressing the judge)."""
    if not store.has_column("items", "flags"):
        return []
    return store.query(
        """
        SELECT f.name AS name, f.field AS field, count(DISTINCT item_id) AS n_items
        FROM (SELECT item_id, unnest(from_json(flags, '[{"name":"VARCHAR","field":"VARCHAR"}]'))
                     AS f
              FROM items WHERE run_id = ? AND json_array_length(flags) > 0)
        GROUP BY ALL ORDER BY n_items DESC, name""",
        [run_id],
    )


def is_audit_run(store: RunStore, run_id: str) -> bool:
    """Whether a run is a vendor audit: its items carry a vendor and an encounter id."""
    rows = store.query(
        "SELECT vendor, json_extract_string(meta, '$.encounter_id') AS encounter "
        "FROM items WHERE run_id = ? LIMIT 1",
        [run_id],
    )
    return bool(rows and rows[0]["vendor"] is not None and rows[0]["encounter"] is not None)


def has_vendors(store: RunStore, run_id: str) -> bool:
    """Whether a run's items name their vendor (a column worth showing)."""
    rows = store.query(
        "SELECT count(*) AS n FROM (SELECT 1 FROM items WHERE run_id = ? AND vendor IS NOT NULL "
        "LIMIT 1)",
        [run_id],
    )
    return bool(rows[0]["n"])


def run_and_rubric(store: RunStore, run_id: str) -> tuple[dict[str, Any], Rubric | None]:
    """A run's row and its rubric (None for a PRM scoring run, which has none)."""
    run = store.get_run(run_id)
    try:
        rubric: Rubric | None = run_rubric(run)
    except StoreError:
        rubric = None
    return run, rubric


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value
