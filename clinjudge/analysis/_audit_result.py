"""Typed vendor-audit statistics: what :func:`audit_for_run` returns and ``judge audit --json``
prints (``to_dict()``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from clinjudge.analysis._result_base import Result, arrow_table, to_pandas
from clinjudge.rubrics import DEFAULT_REDUCER

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa


class VendorSummary(Result):
    """One vendor's final scores of one attribute: mean with bootstrap 95% CI, median, n."""

    n: int = 0
    mean: float | None = None
    median: float | None = None
    ci95: list[float] | None = None


class PairedComparison(Result):
    """Wilcoxon signed-rank test of two vendors on their matched encounters (Holm-corrected)."""

    vendor_a: str
    vendor_b: str
    attribute: str
    n_pairs: int = 0
    n_zero_differences: int = 0
    median_difference: float | None = None
    mean_difference: float | None = None
    statistic: float | None = None
    p: float | None = None
    method: str | None = None
    p_holm: float | None = None
    significant: bool = False


class FlaggedItem(Result):
    """An item a flag rule (or a failed judgment, or text addressing the judge) flagged."""

    item_id: str
    vendor: str
    encounter_id: str
    reasons: list[str] = []


class UnmatchedEncounter(Result):
    """An encounter some vendors lack."""

    encounter_id: str
    present: list[str] = []
    missing: list[str] = []


class VendorCost(Result):
    """One vendor's calls, tokens, cost and latency (totals and per item)."""

    items: int = 0
    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float | None = None
    cost_known: bool = True
    cost_per_item_usd: float | None = None
    latency_s: float | None = None
    latency_per_item_s: float | None = None


class AuditSettings(Result):
    """Bootstrap resamples and seed, significance level, Wilcoxon zero method."""

    n_boot: int = 0
    seed: int = 0
    alpha: float = 0.05
    zero_method: str = "wilcox"


class PPIMean(Result):
    """Judge-corrected (PPI++) physicians' mean of one vendor and attribute, next to the
    physicians-only and judge-only means (see :class:`clinjudge.analysis._ppi.MeanEstimate`)."""

    vendor: str
    attribute: str
    n: int = 0
    N: int = 0
    estimate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    classical_mean: float | None = None
    classical_ci_low: float | None = None
    classical_ci_high: float | None = None
    judge_mean: float | None = None
    judge_ci_low: float | None = None
    judge_ci_high: float | None = None
    effective_n: float | None = None
    lam: float | None = Field(default=None, alias="lambda")
    """The power-tuning parameter (``lambda`` in ``--json``)."""
    interval_warning: str | None = None
    """Why the intervals are missing (``undefined: ...``), of zero width or from fewer rated
    items than ``MIN_RATED``; None when none of these."""


class PPIPair(Result):
    """PPI++ mean difference (first minus second vendor) on matched encounters."""

    first: str
    second: str
    attribute: str
    n: int = 0
    N: int = 0
    lam: float | None = Field(default=None, alias="lambda")
    estimate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    classical_estimate: float | None = None
    classical_ci_low: float | None = None
    classical_ci_high: float | None = None
    judge_estimate: float | None = None
    interval_warning: str | None = None
    """As :attr:`PPIMean.interval_warning`; n counts items rated for both vendors."""


class PhysicianSample(Result):
    """How many of a vendor's items the physicians rated, and which encounters."""

    vendor: str
    items: int = 0
    rated: int = 0
    encounters: list[str] = []


class AuditStatistics(Result):
    """Every statistic of a vendor audit run (``judge audit --json``).

    ``summaries[vendor][attribute]`` are the per-vendor means; ``comparisons`` the paired tests;
    ``flagged`` the flagged items; with physicians' ratings ``ppi``, ``ppi_pairs``,
    ``physician_sample`` and ``ppi_warnings`` (otherwise None).
    """

    run_id: str
    name: str | None = None
    status: str | None = None
    simulated: bool = False
    rubric: str | None = None
    mode: str | None = None
    models: dict[str, str] | None = None
    samples_per_item: int | None = None
    reducer: str = DEFAULT_REDUCER
    """How each item's samples became its final score (set only when not the median)."""
    vendors: list[str]
    n_encounters: int = 0
    n_items: int = 0
    unmatched: list[UnmatchedEncounter] = []
    attributes: list[str]
    summaries: dict[str, dict[str, VendorSummary]]
    comparisons: list[PairedComparison]
    flag_rules: list[str]
    flagged: list[FlaggedItem]
    cost: dict[str, VendorCost] = {}
    settings: AuditSettings = AuditSettings()
    notes: list[str] = []
    ppi: list[PPIMean] | None = None
    ppi_pairs: list[PPIPair] | None = None
    physician_sample: list[PhysicianSample] | None = None
    ppi_warnings: list[str] | None = None

    def statistics(self) -> dict[str, Any]:
        """The audit's statistics as one plain dict (what ``judge audit --json`` prints)."""
        return self.to_dict()

    def to_arrow(self) -> pa.Table:
        """A tidy table, one row per vendor and attribute (the grain of the audit's means).

        Columns: ``vendor``, ``attribute``, ``n``, ``mean``, ``median``, ``ci_low``,
        ``ci_high`` (bootstrap 95% CI of the judge's mean), and where physicians rated a
        sample: ``physicians_n``, ``ppi_estimate``, ``ppi_ci_low``, ``ppi_ci_high`` (the
        judge-corrected physicians' mean) and ``physicians_mean`` (their ratings alone); null
        otherwise. Paired tests are ``comparisons``, flagged items ``flagged``.
        """
        import pyarrow as pa

        ppi = {(r.vendor, r.attribute): r for r in self.ppi or []}
        rows = []
        for vendor in self.vendors:
            for attribute, s in self.summaries.get(vendor, {}).items():
                ci: list[float | None] = list(s.ci95) if s.ci95 else [None, None]
                p = ppi.get((vendor, attribute))
                rows.append(
                    {
                        "vendor": vendor,
                        "attribute": attribute,
                        "n": s.n,
                        "mean": s.mean,
                        "median": s.median,
                        "ci_low": ci[0],
                        "ci_high": ci[1],
                        "physicians_n": p.n if p else None,
                        "ppi_estimate": p.estimate if p else None,
                        "ppi_ci_low": p.ci_low if p else None,
                        "ppi_ci_high": p.ci_high if p else None,
                        "physicians_mean": p.classical_mean if p else None,
                    }
                )
        f64, i64 = pa.float64(), pa.int64()
        schema = pa.schema(
            [
                ("vendor", pa.string()),
                ("attribute", pa.string()),
                ("n", i64),
                ("mean", f64),
                ("median", f64),
                ("ci_low", f64),
                ("ci_high", f64),
                ("physicians_n", i64),
                ("ppi_estimate", f64),
                ("ppi_ci_low", f64),
                ("ppi_ci_high", f64),
                ("physicians_mean", f64),
            ]
        )
        return arrow_table(rows, schema)

    def to_pandas(self) -> pd.DataFrame:
        """:meth:`to_arrow` as a pandas DataFrame (needs pandas)."""
        return to_pandas(self.to_arrow())


class PlannedItem(Result):
    """An item of the sample for physicians to rate."""

    vendor: str
    encounter_id: str
    item_id: str
    """The stored item id (``vendor::encounter_id``)."""


class ExpectedWidth(Result):
    """Expected 95% CI half-widths of one vendor and attribute once the sample is rated."""

    vendor: str
    attribute: str
    n: int = 0
    """Items in the sample with a judge score."""
    N: int = 0
    """Items scored by the judge only."""
    ppi_half_width: float
    """Judge-corrected (PPI++) physicians' mean."""
    classical_half_width: float
    """Physicians' ratings alone."""
    warning: str | None = None
    """Why the half-widths may mislead (the judge's scores do not vary, few items), if so."""


class AuditPlan(Result):
    """A seeded random sample of each vendor's judged items for physicians to rate, and the
    interval half-widths to expect (:func:`audit_plan`, ``judge audit plan --json``)."""

    run_id: str
    size: int
    """Items asked for per vendor (fewer where a vendor has fewer judged items)."""
    sample: list[PlannedItem] = []
    expected: list[ExpectedWidth] = []
    seed: int = 0
    correlation: float
    """The assumed judge-physician correlation."""
