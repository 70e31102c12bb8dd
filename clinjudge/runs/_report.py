"""Summaries of runs: counts, tokens, cost, latency percentiles."""

from __future__ import annotations

import json
from typing import Any

from clinjudge.runs._store import RunStore


def list_runs(store: RunStore) -> list[dict[str, Any]]:
    """Every run, newest first, with its item count and model."""
    return store.query(
        """
        SELECT run_id, name, created_at, status, mode, rubric, n_items, n_samples, simulated,
               json_extract_string(models, '$.judge') AS model
        FROM runs ORDER BY created_at DESC
        """
    )


def flagged_items(store: RunStore, run_id: str) -> list[dict[str, Any]]:
    """Items whose text addresses the judge, with the flags found (``items.flags``).

    Args:
        store: The run store.
        run_id: Full run id.
    """
    if not store.has_column("items", "flags"):  # a database written before flags existed
        return []
    rows = store.query(
        "SELECT item_id, flags FROM items WHERE run_id = ? AND json_array_length(flags) > 0 "
        "ORDER BY position",
        [run_id],
    )
    return [{"item_id": r["item_id"], "flags": json.loads(r["flags"])} for r in rows]


def _one(store: RunStore, sql: str, run_id: str) -> dict[str, Any]:
    rows = store.query(sql, [run_id])
    return rows[0] if rows else {}


def run_summary(store: RunStore, run_id: str) -> dict[str, Any]:
    """Everything `judge runs show` prints for a run.

    Args:
        store: The run store.
        run_id: Run id or unique prefix.
    """
    run = store.get_run(run_id)
    rid = run["run_id"]
    items = _one(
        store,
        """
        SELECT count(DISTINCT item_id) FILTER (WHERE status = 'ok') AS items_ok,
               count(DISTINCT item_id) FILTER (WHERE status = 'failed') AS items_failed
        FROM judgments WHERE run_id = ? AND final""",
        rid,
    )
    samples = _one(
        store,
        """
        SELECT count(*) FILTER (WHERE status = 'ok') AS samples_ok,
               count(*) FILTER (WHERE status = 'failed') AS samples_failed
        FROM samples WHERE run_id = ?""",
        rid,
    )
    calls = _one(
        store,
        """
        SELECT count(*) AS calls, count(*) FILTER (WHERE status <> 'ok') AS calls_failed,
               coalesce(sum(prompt_tokens), 0) AS tokens_in,
               coalesce(sum(completion_tokens), 0) AS tokens_out,
               bool_or(tokens_estimated) AS tokens_estimated,
               sum(cost_usd) AS cost_usd,
               count(*) FILTER (WHERE status = 'ok' AND cost_usd IS NULL) AS calls_unpriced,
               quantile_cont(latency_s, 0.5) AS call_latency_p50_s,
               quantile_cont(latency_s, 0.95) AS call_latency_p95_s
        FROM calls WHERE run_id = ?""",
        rid,
    )
    per_item = _one(
        store,
        """
        SELECT quantile_cont(t, 0.5) AS item_latency_p50_s,
               quantile_cont(t, 0.95) AS item_latency_p95_s,
               quantile_cont(c, 0.5) AS item_cost_p50_usd
        FROM (SELECT item_id, sum(latency_s) AS t, sum(cost_usd) AS c
              FROM calls WHERE run_id = ? GROUP BY item_id)""",
        rid,
    )
    by_agent = store.query(
        """
        SELECT role, agent, model, count(*) AS calls,
               coalesce(sum(prompt_tokens), 0) AS tokens_in,
               coalesce(sum(completion_tokens), 0) AS tokens_out,
               sum(cost_usd) AS cost_usd,
               coalesce(sum(latency_s), 0) AS latency_s_sum
        FROM calls WHERE run_id = ?
        GROUP BY role, agent, model ORDER BY role, agent, model""",
        [rid],
    )
    errors = store.query(
        """
        SELECT error, count(*) AS n FROM samples WHERE run_id = ? AND status = 'failed'
        GROUP BY error ORDER BY n DESC LIMIT 10""",
        [rid],
    )
    return {
        "run_id": rid,
        "name": run["name"],
        "status": run["status"],
        "mode": run["mode"],
        "rubric": f"{run['rubric']} {run['rubric_version']}",
        "models": run["models"],
        "simulated": bool(run["simulated"]),
        "created_at": str(run["created_at"]),
        "finished_at": str(run["finished_at"]) if run["finished_at"] else None,
        "items": run["n_items"],
        "samples_per_item": run["n_samples"],
        **items,
        **samples,
        **calls,
        **per_item,
        "by_agent": by_agent,
        "top_errors": errors,
        "flagged_items": flagged_items(store, rid),
    }
