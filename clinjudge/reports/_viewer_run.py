"""Data of a run's page: totals, score distributions, failures, flags and the item list.

The rows come from the store's named reads (:mod:`clinjudge.runs`), each of which reads only the
rows a page shows or lets DuckDB aggregate, so a run of 100,000 items opens as fast as a small
one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from clinjudge.analysis import ScoreDistribution, run_rubric
from clinjudge.personas import PersonaSet
from clinjudge.reports._viewer_paging import page_window
from clinjudge.reports._viewer_query import ItemQuery
from clinjudge.rubrics import Rubric
from clinjudge.runs import RunStore, StoreError, prompt_cache_totals
from clinjudge.runs.report_reads import (
    calls_by_agent,
    final_score_counts,
    final_scores,
    is_prm_scoring_run,
    item_call_totals,
    item_list_extras,
    item_suspect_flags,
    probe_links,
    run_has_ratings,
    run_has_steps,
    run_items,
    sample_counts,
    scored_items,
)


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


def distribution_charts(distributions: Sequence[ScoreDistribution]) -> list[dict[str, Any]]:
    """Histogram bins of each attribute's final scores, for the run page.

    Args:
        distributions: From :func:`clinjudge.analysis.score_distributions`.
    """
    out = []
    for d in distributions:
        numbers = list(d.counts.items())
        proportion = d.scale == "proportion"
        lo, hi = (0.0, 1.0) if proportion else (float(d.min), float(d.max))
        # Medians of an even number of samples can be x.5; such values get their own bins.
        integer = not proportion and all(float(v).is_integer() for v, _ in numbers)
        if not integer and not proportion:
            bins = [(f"{v:g}", n) for v, n in numbers]
        else:
            bins = _histogram(numbers, lo, hi, integer)
        out.append(
            {
                "key": d.key,
                "name": d.name,
                "bins": bins,
                "n": d.n,
                "missing": d.null + d.failed,
                "mean": d.mean,
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
        ``item_cost_p50_usd``, ``by_agent``, ``final_counts`` (for the distributions) and
        ``prompt_cache`` (cached input tokens, cache writes and the saving, or None).
    """
    counts = final_score_counts(store, run_id) if rubric is not None else []
    first = [r for r in counts if rubric is not None and r["attribute"] == rubric.keys[0]]
    totals: dict[str, Any] = {
        "items_ok": sum(r["n"] for r in first if r["status"] == "ok"),
        "items_failed": sum(r["n"] for r in first if r["status"] == "failed"),
        "final_counts": counts,
    }
    samples = sample_counts(store, run_id)  # the deciding agent's, as `judge runs show` counts
    totals.update(samples_ok=samples["ok"], samples_failed=samples["failed"])
    totals.update(item_call_totals(store, run_id))
    totals["by_agent"] = calls_by_agent(store, run_id)
    # The provider's prompt cache (None in a store from before it was recorded).
    totals["prompt_cache"] = prompt_cache_totals(store, run_id)
    return totals


def _scored_items(
    store: RunStore, run_id: str, query: ItemQuery, page: int, per_page: int
) -> dict[str, Any]:
    """One page of the items of a PRM scoring run, with their lowest step score."""
    paging, scored = scored_items(
        store, run_id, page_window(page, per_page), sort=query.item_sort(), text=query.q
    )
    items = [
        {**r, "vendor": None, "flags": [], "suspect": [], "scores": [], "medians": [],
         "status": "scored", "sort_value": r["lowest"]}
        for r in scored
    ]  # fmt: skip
    return {"items": items, "paging": paging, "query": query, "steps": True, "scored": True,
            "rated": False}  # fmt: skip


def item_rows(
    store: RunStore,
    run_id: str,
    keys: list[str],
    *,
    query: ItemQuery | None = None,
    page: int = 1,
    per_page: int = 100,
) -> dict[str, Any]:
    """One page of a run's items with their final scores, status, flags, cost and latency,
    and the physicians' median of each attribute, filtered and sorted as ``query`` asks.

    Args:
        store: The run store.
        run_id: Full run id.
        keys: Attribute keys, in column order.
        query: The list's sort and filters (default: every item by position).
        page: Page number.
        per_page: Items per page.
    """
    query = query or ItemQuery()
    if is_prm_scoring_run(store, run_id):
        return _scored_items(store, run_id, query, page, per_page)
    window = page_window(page, per_page)
    paging, rows = run_items(
        store, run_id, window, sort=query.item_sort(), filters=query.item_filter()
    )
    ids = [r["item_id"] for r in rows]
    finals: dict[str, dict[str, Any]] = {i: {} for i in ids}
    status: dict[str, str] = {}
    for row in final_scores(store, run_id, ids):
        finals[row["item_id"]][row["attribute"]] = row["value"]
        status[row["item_id"]] = row["status"]
    extras = item_list_extras(store, run_id, ids)
    suspect = item_suspect_flags(store, run_id, ids)
    # A probe run's variants are marked with their probe in the list (#37).
    listed = set(ids)
    probes = {r["item_id"]: r["probe"] for r in probe_links(store, run_id, ids)}
    probes = {k: v for k, v in probes.items() if k in listed}
    items = [
        {
            **row,
            "probe": probes.get(row["item_id"]),
            **extras[row["item_id"]],
            "flags": _loads(row["flags"]) or [],
            "suspect": suspect.get(row["item_id"], []),
            "scores": [finals[row["item_id"]].get(k) for k in keys],
            "medians": [extras[row["item_id"]]["medians"].get(k) for k in keys],
            "status": status.get(row["item_id"], "pending"),
        }
        for row in rows
    ]
    return {
        "items": items,
        "paging": paging,
        "query": query,
        "steps": run_has_steps(store, run_id),
        "scored": False,
        "rated": run_has_ratings(store, run_id),
    }


def run_and_rubric(store: RunStore, run_id: str) -> tuple[dict[str, Any], Rubric | None]:
    """A run's row and its rubric (None for a PRM scoring run, which has none)."""
    run = store.get_run(run_id)
    try:
        rubric: Rubric | None = run_rubric(run)
    except StoreError:
        rubric = None
    return run, rubric


def run_personas(run: dict[str, Any]) -> PersonaSet | None:
    """The personas a run seated, as stored with it when it was prepared.

    The run resolved its persona set once and stored it (``config.personas_data``), so the
    viewer shows the wording the judges read; it never reads the set's file again.

    Args:
        run: The run's row (``RunStore.get_run``).

    Returns:
        The stored set; None for a run that seated none (single judge) or one from a version
        that stored only the set's name.

    Raises:
        ValueError: The stored data is not a persona set (``pydantic.ValidationError``).
    """
    data = (run.get("config") or {}).get("personas_data")
    return None if data is None else PersonaSet.model_validate(data)


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value
