"""The item page's tables: final, per-sample and physicians' scores side by side; call totals."""

from __future__ import annotations

import statistics
from typing import Any

from clinjudge.rubrics import Rubric


def score_rows(data: dict[str, Any], rubric: Rubric | None) -> list[dict[str, Any]]:
    """One row per attribute: final, each sample's deciding agent, each physician, their median.

    Args:
        data: From :func:`clinjudge.reports._viewer_item.item_page`.
        rubric: The run's rubric (None for a PRM scoring run: no rows).
    """
    if rubric is None:
        return []
    scores, humans = data["scores"], data["humans"]
    raters = sorted(humans)
    rows = []
    for attribute in rubric.attributes:
        key = attribute.key
        final = scores["final"].get(key) or {}
        per_sample = []
        for view in scores["samples"]:
            deciding = next(
                (a for a in view.agents if a["agent"] == scores["deciding"]),
                view.agents[0] if view.agents else None,
            )
            value = deciding["values"].get(key) if deciding else None
            per_sample.append(value["value"] if value else None)
        ratings = [humans[r].get(key) for r in raters]
        present = [h for h in ratings if h is not None]
        rows.append(
            {
                "key": key,
                "name": attribute.name,
                "final": final.get("value"),
                "final_status": final.get("status"),
                "samples": per_sample,
                "humans": ratings,
                "human_median": statistics.median(present) if present else None,
            }
        )
    return rows


def call_totals(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """Calls, tokens, cost and summed latency of the item."""
    return {
        "calls": len(calls),
        "tokens_in": sum(c["prompt_tokens"] or 0 for c in calls),
        "tokens_out": sum(c["completion_tokens"] or 0 for c in calls),
        "cost": sum(c["cost_usd"] or 0 for c in calls),
        "latency": sum(c["latency_s"] or 0 for c in calls),
    }


def item_context(data: dict[str, Any], rubric: Rubric | None) -> dict[str, Any]:
    """Template variables of the item page built from :func:`item_page`'s data."""
    scores = data["scores"]
    chair_calls: dict[int, list[dict[str, Any]]] = {}
    for call in data["calls"]:
        if call["role"] == "orchestrator":  # the chair's ledger and planning calls
            chair_calls.setdefault(call["sample"], []).append(call)
    any_final = next(iter(scores["final"].values()), None) or {}
    return {
        "keys": [a.key for a in rubric.attributes] if rubric else [],
        "inputs": data["inputs"],
        "scores": scores,
        "score_rows": score_rows(data, rubric),
        "sample_columns": [s.sample for s in scores["samples"]],
        "raters": sorted(data["humans"]),
        "final_note": any_final.get("error") or any_final.get("rationale"),
        "claims": data["claims"],
        "prm": data["prm"],
        "calls": data["calls"],
        "call_totals": call_totals(data["calls"]),
        "chair_calls": chair_calls,
    }
