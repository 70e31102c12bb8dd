"""Columns of ``judge compare`` that it sorts by, in a module of their own so that the CLI's
--help can list them without loading the statistics."""

from __future__ import annotations

# Sortable columns; True where larger is better (sorted descending).
SORT_COLUMNS: dict[str, bool] = {
    "icc3k": True,
    "alpha_ordinal": True,
    "ac2_ordinal": True,
    "mean_abs_diff": False,
    "failed_samples": False,
    "cost_per_item_usd": False,
    "latency_per_item_s": False,
    "samples": False,
    "shots": False,
    "name": False,
    "run_id": False,
    "model": False,
}
