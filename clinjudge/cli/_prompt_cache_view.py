"""The provider prompt cache in `judge runs show`: cached input tokens, writes and the saving."""

from __future__ import annotations

from typing import Any

from clinjudge.runs import RunStore, prompt_cache_by_agent, prompt_cache_totals


def with_prompt_cache(store: RunStore, summary: dict[str, Any]) -> dict[str, Any]:
    """The run summary with its prompt-cache figures after ``cost_usd``, and each by-agent
    row with its cached input tokens.

    Adds ``cached_input_tokens`` (prompt tokens the provider read from its cache),
    ``cached_input_share`` (of all prompt tokens), ``cache_write_tokens`` (Anthropic) and
    ``cache_saving_usd`` (against full input prices). A store from before these were recorded
    gets nothing added.

    Args:
        store: The run store.
        summary: What ``run_summary`` returned.
    """
    run_id = str(summary["run_id"])
    totals = prompt_cache_totals(store, run_id)
    if totals is None:
        return summary
    cached = totals["cached_input_tokens"]
    share = cached / totals["tokens_in"] if cached is not None and totals["tokens_in"] else None
    figures = {
        "cached_input_tokens": cached,
        "cached_input_share": None if share is None else round(share, 4),
        "cache_write_tokens": totals["cache_write_tokens"],
        "cache_saving_usd": totals["cache_saving_usd"],
    }
    out: dict[str, Any] = {}
    for key, value in summary.items():
        out[key] = value
        if key == "cost_usd":
            out.update(figures)
    out.update({k: v for k, v in figures.items() if k not in out})
    by_agent = {
        (r["role"], r["agent"], r["model"]): r["cached_input_tokens"]
        for r in prompt_cache_by_agent(store, run_id) or []
    }
    for row in out.get("by_agent") or []:
        row["cached_input_tokens"] = by_agent.get((row["role"], row["agent"], row["model"]))
    return out
