"""Compare judge configurations: agreement with physicians next to failures, cost and latency.

One row per run: its configuration (rubric, mode, models, shots, samples), pooled agreement
(ICC(3,k) of the judge against the human median with its 95% CI, Krippendorff's alpha and Gwet's
AC2 on the ordinal scale), the mean |judge - human median| over the Likert attributes, failed
samples, and cost and latency per item from the ``calls`` table. When runs are ``judge probe``
runs, their probe results are set side by side (``Comparison.probes``), so a team can pick the
judge that both agrees with physicians and reacts to the edits it should.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from clinjudge.analysis._agreement_result import AgreementResult, AttributeAgreement, Interval
from clinjudge.analysis._agreement_run import AgreementError, agreement_for_run
from clinjudge.analysis._probe import ProbeComparisonRow, probe_comparison, probe_statistics
from clinjudge.analysis._result_base import Result, arrow_table, to_pandas
from clinjudge.analysis._statistics import compare_values, sort_columns
from clinjudge.errors import UserError
from clinjudge.runs import RunStore, StoreError, prompt_cache_totals, quality_summary
from clinjudge.runs.analysis_reads import is_probe_run, item_call_means, sample_counts

if TYPE_CHECKING:
    import pandas as pd


class BlockSummary(Result):
    """The headline numbers of one analysis block (an attribute, or pooled).

    Judge columns compare the judge with the physicians' median; ``raters_icc3k`` is the
    physicians' own ICC(3,k) among themselves, for reference.
    """

    icc3k: float | None = None
    icc3k_ci95: list[float | None] | None = None
    alpha_ordinal: float | None = None
    ac2_ordinal: float | None = None
    median_difference: float | None = None
    iqr: float | None = None
    wilcoxon_p: float | None = None
    percent_agreement: float | None = None
    kappa: float | None = None
    raters_icc3k: float | None = None
    n_units: int | None = None
    binary: bool = False


def _ci(interval: Interval | None) -> list[float | None] | None:
    if interval is None or interval.ci95 is None:
        return None
    return (list(interval.ci95) + [None, None])[:2]


def block_summary(block: AttributeAgreement | None) -> BlockSummary:
    """The headline numbers of one analysis block (an attribute, or pooled; None: no block)."""
    if block is None:
        return BlockSummary()
    judged = block.judge_vs_physicians
    raters_icc = block.physicians_among_themselves.icc
    out = BlockSummary(raters_icc3k=raters_icc.value if raters_icc else None, binary=block.binary)
    if judged is None:
        return out
    icc = judged.icc
    alpha = judged.krippendorff_alpha.get("ordinal")
    ac2 = judged.gwet_ac2.get("ordinal")
    kappa = judged.kappa
    return out.model_copy(
        update={
            "icc3k": icc.value if icc else None,
            "icc3k_ci95": _ci(icc),
            "alpha_ordinal": alpha.value if alpha else None,
            "ac2_ordinal": ac2.value if ac2 else None,
            "median_difference": judged.median_difference,
            "iqr": judged.iqr,
            "wilcoxon_p": judged.wilcoxon.p if judged.wilcoxon else None,
            "percent_agreement": judged.percent_agreement,
            "kappa": kappa.value if kappa else None,
            "n_units": judged.n_units,
        }
    )


class ComparisonRow(Result):
    """One run of ``judge compare``: configuration, pooled agreement, failures, cost, latency.

    Agreement columns are None when no physicians' ratings overlap the run. A statistic
    registered with ``analysis.register_statistic`` for the compare tables adds its pooled value
    under its name (an extra field, after the others in ``to_dict()``).
    """

    run_id: str
    name: str | None = None
    rubric: str
    mode: str | None = None
    model: str | None = None
    models: dict[str, str] = {}
    shots: int = 0
    samples: int | None = None
    simulated: bool = False
    status: str | None = None
    items: int | None = None
    icc3k: float | None = None
    icc3k_ci95: list[float | None] | None = None
    alpha_ordinal: float | None = None
    ac2_ordinal: float | None = None
    mean_abs_diff: float | None = None
    items_rated: int = 0
    raters: int = 0
    cost_per_item_usd: float | None = None
    cost_known: bool = True
    latency_per_item_s: float | None = None
    calls: int = 0
    samples_total: int = 0
    failed_samples: int = 0
    suspect_samples: int = 0
    cached_input_share: float | None = None
    cache_saving_per_item_usd: float | None = None


_ARROW_COLUMNS = [c for c in ComparisonRow.model_fields if c not in ("models", "icc3k_ci95")]


@dataclass
class Comparison:
    """Rows of ``judge compare`` plus the full agreement analysis of each run.

    Args:
        rows: One row per run (see :data:`SORT_COLUMNS` for the numeric columns).
        agreements: Run id to its :func:`agreement_for_run` result (None when no ratings
            overlap that run).
        notes: Messages about runs that could not be compared fully.
        errors: Run id to the reason its agreement could not be computed.
        probes: The probe runs' results side by side: per probe a verdict row, then a row per
            attribute, each with a cell per probe run (empty when no run is a probe run).
    """

    rows: list[ComparisonRow]
    agreements: dict[str, AgreementResult | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    probes: list[ProbeComparisonRow] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """What ``judge compare --json`` prints: ``runs`` (one object per row), ``notes`` and
        ``probes`` (one object per probe and per probe and attribute; empty without probe
        runs)."""
        return {
            "runs": [r.to_dict() for r in self.rows],
            "notes": list(self.notes),
            "probes": [p.to_dict() for p in self.probes],
        }

    def to_arrow(self) -> pa.Table:
        """One row per run (the grain of a comparison): every column of :class:`ComparisonRow`
        except ``models``, with the ICC(3,k) interval as ``icc3k_ci_low`` and
        ``icc3k_ci_high``."""
        records = []
        for row in self.rows:
            record = {c: getattr(row, c) for c in _ARROW_COLUMNS}
            ci = row.icc3k_ci95 or [None, None]
            record["icc3k_ci_low"], record["icc3k_ci_high"] = ci[0], ci[1]
            records.append(record)
        fields = [
            (name, _arrow_type(ComparisonRow.model_fields[name].annotation))
            for name in _ARROW_COLUMNS
        ]
        fields += [("icc3k_ci_low", pa.float64()), ("icc3k_ci_high", pa.float64())]
        return arrow_table(records, pa.schema(fields))

    def to_pandas(self) -> pd.DataFrame:
        """:meth:`to_arrow` as a pandas DataFrame (needs pandas)."""
        return to_pandas(self.to_arrow())


def _arrow_type(annotation: Any) -> pa.DataType:

    text = str(annotation)
    if "bool" in text:
        return pa.bool_()
    if "float" in text:
        return pa.float64()
    if "int" in text:
        return pa.int64()
    return pa.string()


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
        "suspect_samples": quality_summary(store, run_id)["suspect_samples"],
        **_prompt_cache(store, run_id),
    }


def _prompt_cache(store: RunStore, run_id: str) -> dict[str, Any]:
    """Share of prompt tokens the provider served from its prompt cache, and the dollars
    that saved per item (None where the store did not record it)."""
    totals = prompt_cache_totals(store, run_id)
    if totals is None or totals["cached_input_tokens"] is None:
        return {"cached_input_share": None, "cache_saving_per_item_usd": None}
    tokens, items, saving = totals["tokens_in"], totals["items"], totals["cache_saving_usd"]
    return {
        "cached_input_share": totals["cached_input_tokens"] / tokens if tokens else None,
        "cache_saving_per_item_usd": saving / items if saving is not None and items else None,
    }


def _sort_direction(column: str) -> bool:
    """Whether ``column`` sorts largest first (a UserError for a column it cannot sort by)."""
    sortable = sort_columns()
    if column not in sortable:
        raise UserError(f"cannot sort by {column!r}; choose one of {', '.join(sorted(sortable))}")
    return sortable[column]


def _sort(rows: list[ComparisonRow], column: str) -> list[ComparisonRow]:
    descending = _sort_direction(column)
    present = [r for r in rows if getattr(r, column, None) is not None]
    missing = [r for r in rows if getattr(r, column, None) is None]
    present.sort(key=lambda r: getattr(r, column), reverse=descending)
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
        run_ids: Run ids or unique parts of them.
        sort: A column of :data:`SORT_COLUMNS` or a registered statistic's compare key with a
            better direction (``sort_columns``); agreement columns sort best first, cost,
            latency, failures and differences lowest first; runs without a value go last.
        n_boot: Bootstrap resamples for each run's analysis.
        seed: Bootstrap seed.
        cache: Reuse each run's analysis from the store's ``agreement_cache`` while its input
            and settings are unchanged, and keep new ones there when the store is writable.
    """
    if sort is not None:
        _sort_direction(sort)  # an unknown column fails before any work
    rows: list[ComparisonRow] = []
    agreements: dict[str, AgreementResult | None] = {}
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
        mean_abs = agreement.mean_abs_difference if agreement else None
        # The registry's compare columns (icc3k, alpha_ordinal, ac2_ordinal and any registered
        # statistic's, the latter after the fixed columns of --json).
        row.update(compare_values(agreement.pooled if agreement else None))
        row.update(
            {
                "mean_abs_diff": mean_abs.pooled if mean_abs else None,
                "items_rated": agreement.n_items_rated if agreement else 0,
                "raters": len(agreement.raters) if agreement else 0,
            }
        )
        row.update(_run_costs(store, rid))
        rows.append(ComparisonRow.model_validate(row))
    if sort is not None:
        rows = _sort(rows, sort)
    probes = _probe_results(store, [r.run_id for r in rows], notes)
    return Comparison(rows=rows, agreements=agreements, notes=notes, errors=errors, probes=probes)


def _probe_results(
    store: RunStore, run_ids: list[str], notes: list[str]
) -> list[ProbeComparisonRow]:
    """The probe table of the probe runs among ``run_ids`` (in their order); a probe run whose
    statistics cannot be read gets a note, not an error (the rest of the table still shows)."""
    results = []
    for rid in run_ids:
        if not is_probe_run(store, rid):
            continue
        try:
            results.append(probe_statistics(store, rid))
        except (StoreError, KeyError, ValueError) as exc:
            notes.append(f"{rid}: probe results not computed: {exc}")
    return probe_comparison(results) if results else []
