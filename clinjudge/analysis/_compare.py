"""Compare judge configurations: agreement with physicians next to failures, cost and latency.

One row per run: its configuration (rubric, mode, models, shots, samples), pooled agreement
(ICC(3,k) of the judge against the human median with its 95% CI, Krippendorff's alpha and Gwet's
AC2 on the ordinal scale), the mean |judge - human median| over the Likert attributes, failed
samples, and cost and latency per item from the ``calls`` table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clinjudge.analysis._agreement_run import AgreementError, agreement_for_run
from clinjudge.errors import UserError
from clinjudge.runs import RunStore, item_call_means, sample_counts

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


def stat_value(value: Any) -> float | None:
    """A statistic as a number: plain numbers pass, ``{"value": x, ...}`` gives x."""
    if isinstance(value, dict):
        value = value.get("value")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def stat_ci(value: Any) -> list[float | None] | None:
    """The ``ci95`` of a statistic given as a dict, else None."""
    if isinstance(value, dict) and isinstance(value.get("ci95"), list | tuple):
        lo, hi = value["ci95"][:2]
        return [stat_value(lo), stat_value(hi)]
    return None


def block_summary(block: dict[str, Any] | None) -> dict[str, Any]:
    """The headline numbers of one analysis block (an attribute, or pooled).

    Judge columns compare the judge with the human median (the block's ``primary``);
    ``raters_icc3k`` is the physicians' own ICC(3,k) among themselves, for reference.
    """
    block = block or {}
    primary = block.get("primary") or {}
    alpha = primary.get("krippendorff_alpha") or {}
    ac2 = primary.get("gwet_ac2") or {}
    wilcoxon = block.get("wilcoxon") or {}
    raters_icc = (block.get("icc") or {}).get("ICC3k")
    return {
        "icc3k": stat_value(primary) if "form" in primary else None,
        "icc3k_ci95": stat_ci(primary) if "form" in primary else None,
        "alpha_ordinal": stat_value(alpha.get("ordinal")),
        "ac2_ordinal": stat_value(ac2.get("ordinal")),
        "median_difference": stat_value(block.get("median_difference")),
        "iqr": stat_value(block.get("iqr")),
        "wilcoxon_p": stat_value(wilcoxon.get("p")),
        "percent_agreement": stat_value(primary.get("percent_agreement")),
        "kappa": stat_value(primary.get("kappa")),
        "raters_icc3k": stat_value(raters_icc),
        "n_units": primary.get("n_units"),
        "binary": block.get("scale") == "binary",
    }


@dataclass
class Comparison:
    """Rows of ``judge compare`` plus the full agreement analysis of each run.

    Args:
        rows: One dict per run (see :data:`SORT_COLUMNS` for the numeric columns).
        agreements: Run id to the dict of :func:`agreement_for_run` (None when no ratings
            overlap that run).
        notes: Messages about runs that could not be compared fully.
        errors: Run id to the reason its agreement could not be computed.
    """

    rows: list[dict[str, Any]]
    agreements: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)


def _run_costs(store: RunStore, run_id: str) -> dict[str, Any]:
    costs = item_call_means(store, run_id)
    samples = sample_counts(store, run_id)
    unpriced = int(costs["calls_unpriced"] or 0)
    return {
        "cost_per_item_usd": costs["cost_per_item_usd"],
        "cost_known": unpriced == 0,
        "latency_per_item_s": costs["latency_per_item_s"],
        "calls": int(costs["calls"] or 0),
        "samples_total": samples["total"],
        "failed_samples": samples["failed"],
    }


def _sort(rows: list[dict[str, Any]], column: str) -> list[dict[str, Any]]:
    if column not in SORT_COLUMNS:
        raise UserError(
            f"cannot sort by {column!r}; choose one of {', '.join(sorted(SORT_COLUMNS))}"
        )
    descending = SORT_COLUMNS[column]
    present = [r for r in rows if r.get(column) is not None]
    missing = [r for r in rows if r.get(column) is None]
    present.sort(key=lambda r: r[column], reverse=descending)
    return present + missing


def compare_runs(
    store: RunStore,
    run_ids: list[str],
    *,
    sort: str | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    cache: bool = True,
) -> Comparison:
    """Compare runs (judge configurations) on agreement, failures, cost and latency.

    A run without overlapping human ratings still gets its cost and failure columns; its
    agreement columns are None and a note says why.

    Args:
        store: The run store.
        run_ids: Run ids or unique prefixes.
        sort: A column of :data:`SORT_COLUMNS`; agreement columns sort best first, cost,
            latency, failures and differences lowest first; runs without a value go last.
        n_boot: Bootstrap resamples for each run's analysis.
        seed: Bootstrap seed.
        cache: Reuse each run's analysis from the store's ``agreement_cache`` while its input
            and settings are unchanged, and keep new ones there when the store is writable.
    """
    if sort is not None and sort not in SORT_COLUMNS:
        raise UserError(f"cannot sort by {sort!r}; choose one of {', '.join(sorted(SORT_COLUMNS))}")
    rows: list[dict[str, Any]] = []
    agreements: dict[str, dict[str, Any] | None] = {}
    notes: list[str] = []
    errors: dict[str, str] = {}
    seen: set[str] = set()
    for wanted in run_ids:
        run = store.get_run(wanted)
        rid = run["run_id"]
        if rid in seen:
            continue
        seen.add(rid)
        config = run["config"] or {}
        models = run["models"] or {}
        row: dict[str, Any] = {
            "run_id": rid,
            "name": run["name"],
            "rubric": f"{run['rubric']} {run['rubric_version']}",
            "mode": run["mode"],
            "model": models.get("judge"),
            "models": models,
            "shots": int(config.get("shots") or 0),
            "samples": run["n_samples"],
            "simulated": bool(run["simulated"]),
            "status": run["status"],
            "items": run["n_items"],
        }
        try:
            agreement = agreement_for_run(store, rid, n_boot=n_boot, seed=seed, cache=cache)
        except AgreementError as exc:
            agreement = None
            errors[rid] = str(exc)
            notes.append(f"{rid}: agreement not computed: {exc}")
        agreements[rid] = agreement
        pooled = block_summary(agreement["pooled"] if agreement else None)
        row.update(
            {
                "icc3k": pooled["icc3k"],
                "icc3k_ci95": pooled["icc3k_ci95"],
                "alpha_ordinal": pooled["alpha_ordinal"],
                "ac2_ordinal": pooled["ac2_ordinal"],
                "mean_abs_diff": (
                    agreement["mean_abs_difference"]["pooled"] if agreement else None
                ),
                "items_rated": agreement["n_items_rated"] if agreement else 0,
                "raters": len(agreement["raters"]) if agreement else 0,
            }
        )
        row.update(_run_costs(store, rid))
        rows.append(row)
    if sort is not None:
        rows = _sort(rows, sort)
    return Comparison(rows=rows, agreements=agreements, notes=notes, errors=errors)
